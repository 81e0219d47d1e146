"""Writes the tokenizer tests' non-ASCII text to argv[1]: accents, CJK, emoji,
digits, contractions and runs of ASCII and Unicode whitespace, first as prose, then
as a seeded random mix of the same pieces (every boundary between classes)."""
import random
import sys

PROSE = """Café déjà vu: naïve façade, Œuvre, Straße, ÅSA, ﬁne ligatures.
日本語のテキストと中文文本，한국어 텍스트。 Ελληνικά και Русский текст!
Emoji 🙂🚀👩‍👩‍👧 and flags 🇫🇷🇯🇵; numbers ١٢٣ ⅷ ½ ², 3.14159 and 1,000,000.
She's here, they're gone, we've seen, I'm fine, you'll go, he'd say; DON'T SHOUT 'quoted'.
Tabs\tand\t\tspaces   and\u00a0no-break\u2003em\u3000ideographic\u2028line\u2029para\x85nel.
Trailing spaces   
\n\n\r\n  indented\v\ffeeds \x1c\x1d\x1e\x1f separators.
"""

PIECES = ["a", "Z", "é", "ß", "日", "語", "한", "Ж", "9", "٣", "½", "Ⅷ", "🙂", "‍", "👩", "!", "?", "'", "'s",
          "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "-", "—", "_", "\"", "«", "»", " ", "  ", "\t", "\n",
          "\r\n", "\u00a0", "\u2003", "\u3000", "\u2028", "\x85", "\x0b", "\x1c", "\u200b", "\ufeff",
          "\u0301", "x\u0301", "word", " word", "123", " 456", "..."]


def main():
    rng = random.Random(16)
    parts = [PROSE]
    for _ in range(60000):
        parts.append(rng.choice(PIECES))
    with open(sys.argv[1], "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()
