#!/bin/bash
# A stand-in training run: reads the prepared data, "trains" for a few epochs, writes a checkpoint.
set -euo pipefail
echo "training job ${SLURM_JOB_ID} (${SLURM_JOB_NAME}) on ${SLURM_JOB_NODELIST:-unknown}"
rows=$(wc -l < data/train.csv)
for epoch in $(seq 1 {{ params.epochs }}); do
  echo "epoch ${epoch}/{{ params.epochs }}: ${rows} rows, loss=$(awk -v e="$epoch" 'BEGIN{printf "%.3f", 1/e}')"
  sleep {{ params.epoch_seconds }}
done
mkdir -p checkpoints
echo "weights after {{ params.epochs }} epochs" > "checkpoints/model-${SLURM_JOB_ID}.ckpt"
echo "checkpoint written: checkpoints/model-${SLURM_JOB_ID}.ckpt"
# The job's result, for Airflow: the task pushes this JSON as XCom "slurm_result" (publish_results=True).
val_acc=$(awk -v e="{{ params.epochs }}" 'BEGIN{printf "%.3f", 1 - 0.2/e}')
printf '{"val_acc": %s, "checkpoint": "checkpoints/model-%s.ckpt"}\n' "$val_acc" "$SLURM_JOB_ID" \
  > "${SLURMAPI_RETURN_FILE:-/dev/null}"
