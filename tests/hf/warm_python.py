"""Runs Python scripts one after another in one interpreter, so that torch and transformers
(3-9 s to import on 2 cores) are imported once per shell test, not once per check.
Started by warm_python in tests/cli/common.sh; py_run there sends it requests.

  warm_python.py REQUESTS REPLIES   REQUESTS and REPLIES are FIFOs (made by the shell)

A request is lines: N (the number of arguments), the directory to run in, the file to
write the script's stdout and stderr to, then N lines: the script and its arguments. The
reply is one line, the script's exit status (as `python SCRIPT ARGS...` would give it:
0, the SystemExit code, or 1 for an exception, whose traceback goes to the output file).
The scripts keep no state between runs that matters to them: each seeds its own random
numbers (check_hf.py, step_check.py).
"""
import os
import runpy
import sys
import traceback


def run(cwd, out, argv):
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    status = 0
    try:
        os.chdir(cwd)
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return status


def main():
    requests = open(sys.argv[1])
    replies = open(sys.argv[2], "w")
    while True:
        line = requests.readline()
        if not line:
            return
        n = int(line)
        cwd = requests.readline().rstrip("\n")
        out = requests.readline().rstrip("\n")
        argv = [requests.readline().rstrip("\n") for _ in range(n)]
        replies.write("%d\n" % run(cwd, out, argv))
        replies.flush()


if __name__ == "__main__":
    main()
