"""median_rate.py METRICS.jsonl [SKIP] — "TOKENS_PER_S STEP_MS": the medians over a ctrain run's
training steps (metrics.jsonl lines with a train_loss) after the first SKIP (default 1: the first
step warms caches), for the CPU benchmark scripts (run.sh, cpu_scaling.sh, blas_cores.sh)."""
import json
import statistics
import sys


def main():
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    rows = [json.loads(line) for line in open(sys.argv[1]) if '"train_loss"' in line][skip:]
    tok = statistics.median(r["tokens_per_s"] for r in rows)
    ms = statistics.median(r["step_ms"] for r in rows)
    print(f"{tok:.0f} {ms:.0f}")


if __name__ == "__main__":
    main()
