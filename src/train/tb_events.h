/* TensorBoard event files (tb_events.c; docs/formats.md, "TensorBoard event files"):
 * a run's scalars written as Event protocol buffers in TFRecord framing, readable by
 * `tensorboard --logdir`. Written by the report (train_report.c) on rank 0, beside
 * metrics.jsonl. Internal to src/train/. */
#ifndef ATOLL_TB_EVENTS_H
#define ATOLL_TB_EVENTS_H

#include "atoll/atoll.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  FILE *f;
  char path[1400]; /* DIR/events.out.tfevents.... */
} atoll_tb;

typedef struct {
  const char *tag;
  float value;
} atoll_tb_scalar;

/* CRC-32C (Castagnoli; reflected polynomial 0x82F63B78), as TFRecord frames use it. */
uint32_t atoll_crc32c(const void *data, size_t n);

/* Makes dir and a new event file in it whose name sorts after every earlier one there;
 * writes the file_version record and a SessionLog START at step first_step (TensorBoard
 * then drops the steps >= first_step of the directory's earlier files). */
int atoll_tb_open(atoll_tb *tb, const char *dir, int64_t first_step, atoll_err *err);
/* One Event at (wall_time, step) with a Summary of n simple_value scalars; flushed.
 * 0, or -1 with errno set (the write failed). */
int atoll_tb_scalars(atoll_tb *tb, double wall_time, int64_t step, const atoll_tb_scalar *v, int n);
/* Flushes and fsyncs: 0, or -1 with errno set. */
int atoll_tb_sync(atoll_tb *tb);
void atoll_tb_close(atoll_tb *tb);

#endif
