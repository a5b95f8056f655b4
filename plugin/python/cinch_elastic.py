#!/usr/bin/env python3
"""cinch's helper for elastic and GPU-sharing training jobs (docs/policies/elastic.md,
docs/policies/sharing.md, docs/users.md).

An elastic job is submitted with a total GPU count, a range cinch may choose from, and the
consent every resize needs::

    sbatch --gpus=8 --requeue --comment "cinch:app=bert,elastic=4-16,ckpt=yes" train.sh

cinch may start it on any count in the range, and may requeue it later to restart it on another.
The contract, which this helper implements for a training script:

1. At each start, read the GPU count Slurm gave the job (``allocated_gpus``).
2. Scale the global batch size and the learning rate linearly from the values the job was tuned
   for, the batch capped at a maximum (``scaled``) -- the rule ONES uses, and the one cinch's
   simulator assumes (``cinch_core::elastic::scaled_batch``).
3. Resume from the last checkpoint, and save one when Slurm signals the requeue
   (``CheckpointOnSignal``; Slurm sends SIGTERM, then SIGKILL after KillWait).
4. Optionally report progress so cinch can size the job from measured throughput
   (``report_progress``: per-mille done, the rate, and the GPUs it was measured on, written into
   the job's comment as cinch hints; Slurm lets a job's owner update its comment).

A job that may share a GPU (``share=yes``) reports the peak GPU memory it measured
(``report_gpu_memory``, e.g. from ``torch.cuda.max_memory_allocated()``) and, while it holds a
whole GPU, how busy it keeps that GPU (``report_gpu_busy``, measured with ``measure_gpu_busy``
from NVML's utilisation through ``nvidia-smi``): cinch predicts later similar jobs of the same
user (same ``app=`` and ``batch=``, or job name) from both, and weighs what sharing a GPU with
this job costs its neighbours by the second.

Only the Python standard library; works as a module or from shell scripts::

    eval "$(python3 cinch_elastic.py env --base-batch 256 --base-lr 0.1 --base-gpus 8 \\
        --max-batch 4096)"
    echo "$CINCH_GPUS GPUs, batch $CINCH_BATCH, learning rate $CINCH_LR"
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

HINT_PREFIX = "cinch:"


class HelperError(Exception):
    """Something the job's environment does not say, or says wrongly."""


def _scontrol_show_job(job_id, scontrol="scontrol"):
    out = subprocess.run(
        [scontrol, "show", "job", "-o", str(job_id)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    fields = {}
    # `Key=Value` pairs; values may hold spaces only in the last fields (Comment=..., etc.), so
    # split on the keys.
    for match in re.finditer(r"(\w+(?::\w+)?)=(.*?)(?=\s\w+(?::\w+)?=|$)", out.strip()):
        fields[match.group(1)] = match.group(2)
    return fields


def _gpus_in_tres(tres):
    """GPUs in a TRES string such as ``cpu=2,gres/gpu=8,node=2`` (0 if none)."""
    total = 0
    for item in (tres or "").split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            try:
                total += int(value)
            except ValueError:
                raise HelperError(f"cannot read the GPU count in {tres!r}")
    return total


def _gpus_in_request(tres):
    """GPUs in a request such as ``gres:gpu:8`` or ``gres:gpu:a100:8`` (0 if none)."""
    total = 0
    for item in (tres or "").split(","):
        parts = item.split(":")
        if len(parts) >= 3 and parts[0] == "gres" and parts[1] == "gpu":
            try:
                total += int(parts[-1])
            except ValueError:
                raise HelperError(f"cannot read the GPU count in {tres!r}")
    return total


def allocated_gpus(env=None, scontrol="scontrol"):
    """The job's total GPU count, as Slurm allocated it for this run.

    From Slurm's own record of the allocation (``AllocTRES`` in ``scontrol show job``, when the
    cluster accounts GPUs; else the job's total request ``TresPerJob``), which reflects a
    resize; else from the environment of this node (``SLURM_GPUS_ON_NODE`` times
    ``SLURM_JOB_NUM_NODES``, as allocations of elastic jobs are even where cinch places them),
    else the visible devices.
    """
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if job_id:
        try:
            job = _scontrol_show_job(job_id, scontrol)
            gpus = _gpus_in_tres(job.get("AllocTRES"))
            if gpus > 0:
                return gpus
            # Clusters that do not account gres/gpu: the total request of a running --gpus job
            # is what it was given.
            gpus = _gpus_in_request(job.get("TresPerJob"))
            if gpus > 0:
                return gpus
        except (OSError, subprocess.CalledProcessError):
            pass  # no scontrol here: the environment below
    per_node = env.get("SLURM_GPUS_ON_NODE")
    if per_node:
        return int(per_node) * int(env.get("SLURM_JOB_NUM_NODES", "1"))
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if visible.strip():
        return len([d for d in visible.split(",") if d.strip()])
    raise HelperError("no GPU allocation in this environment (not inside a Slurm GPU job?)")


def scaled(base_batch, base_lr, base_gpus, gpus, max_batch):
    """(global batch, learning rate) on ``gpus`` GPUs: linear from (``base_batch``,
    ``base_lr``) on ``base_gpus``; the batch capped at ``max_batch`` and never below 1; the rate
    follows the batch actually used."""
    if min(base_batch, base_gpus, gpus, max_batch) < 1 or base_lr <= 0:
        raise HelperError("batch sizes, GPU counts and the learning rate must be positive")
    batch = max(1, min(base_batch * gpus // base_gpus, max_batch))
    return batch, base_lr * batch / base_batch


def save_checkpoint(path, state):
    """Writes ``state`` (JSON-serialisable) atomically: a crash mid-write keeps the old one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ckpt-")
    with os.fdopen(fd, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path, default=None):
    """The last checkpoint, or ``default`` when there is none yet."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


class CheckpointOnSignal:
    """Calls ``save()`` once when Slurm signals the end of this run (a requeue or the time
    limit: SIGTERM, or the signal chosen with ``sbatch --signal``), then exits with ``code``
    so the job ends before SIGKILL."""

    def __init__(self, save, signals=(signal.SIGTERM, signal.SIGUSR1), code=0):
        self.save = save
        self.code = code
        self.signalled = False
        for s in signals:
            signal.signal(s, self._handle)

    def _handle(self, signum, _frame):
        if self.signalled:
            return
        self.signalled = True
        self.save()
        sys.exit(self.code)


def merge_hints(comment, hints):
    """The job's comment with ``hints`` (a dict) set in its ``cinch:`` word, everything else
    kept."""
    words = (comment or "").split()
    current = {}
    rest = []
    for word in words:
        if word.startswith(HINT_PREFIX):
            for pair in word[len(HINT_PREFIX):].split(","):
                key, sep, value = pair.partition("=")
                if sep and key:
                    current[key] = value
        else:
            rest.append(word)
    current.update({k: str(v) for k, v in hints.items()})
    cinch = HINT_PREFIX + ",".join(f"{k}={v}" for k, v in current.items())
    return " ".join(rest + [cinch])


def report_progress(done_fraction, rate_per_s, gpus, env=None, scontrol="scontrol"):
    """Tells cinch how far the job is: per-mille done (``iters``/``iters_done``), the per-mille
    rate it measured per second (``iter_rate``) and on how many GPUs (``rate_gpus``)."""
    env = os.environ if env is None else env
    if not 0 <= done_fraction <= 1 or rate_per_s <= 0 or gpus < 1:
        raise HelperError("progress must be 0..1, the rate and the GPU count positive")
    hints = {
        "iters": 1000,
        "iters_done": int(done_fraction * 1000),
        "iter_rate": f"{rate_per_s * 1000:.6g}",
        "rate_gpus": gpus,
    }
    _update_hints(hints, env, scontrol)


def _update_hints(hints, env, scontrol):
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        raise HelperError("not inside a Slurm job (SLURM_JOB_ID is not set)")
    comment = _scontrol_show_job(job_id, scontrol).get("Comment", "")
    if comment == "(null)":
        comment = ""
    subprocess.run(
        [scontrol, "update", f"JobId={job_id}", f"Comment={merge_hints(comment, hints)}"],
        check=True,
        capture_output=True,
        text=True,
    )


def report_gpu_memory(peak_gib, env=None, scontrol="scontrol"):
    """Tells cinch the peak GPU memory the job measured (GiB), as ``gpu_mem_peak``."""
    env = os.environ if env is None else env
    if not 0 < peak_gib <= 4096:
        raise HelperError("the peak must be more than 0 and at most 4096 GiB")
    _update_hints({"gpu_mem_peak": f"{peak_gib:.4g}G"}, env, scontrol)


def measure_gpu_busy(samples=10, interval_s=1.0, env=None, nvidia_smi="nvidia-smi", sleep=None):
    """The share of time the job's GPU is busy (NVML's utilisation, averaged over ``samples``
    readings ``interval_s`` apart), as a fraction. Only for a job holding whole GPUs: on shards
    the GPU's utilisation is its neighbours' too."""
    import time

    env = os.environ if env is None else env
    if env.get("SLURM_SHARDS_ON_NODE"):
        raise HelperError(
            "this job runs on shards of a shared GPU: its utilisation is not the job's own "
            "(report it from a run on a whole GPU)"
        )
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if not visible or "," in visible:
        raise HelperError("measure on a job of exactly one GPU (CUDA_VISIBLE_DEVICES names one)")
    if not 1 <= samples <= 3600:
        raise HelperError("samples must be from 1 to 3600")
    sleep = time.sleep if sleep is None else sleep
    readings = []
    for i in range(samples):
        if i:
            sleep(interval_s)
        try:
            out = subprocess.run(
                [nvidia_smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-i", visible],
                check=True, capture_output=True, text=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as e:
            raise HelperError(f"nvidia-smi failed: {e}") from e
        try:
            readings.append(float(out.splitlines()[0]))
        except (ValueError, IndexError) as e:
            raise HelperError(f"nvidia-smi said {out!r}, not a utilisation") from e
    return max(0.01, min(1.0, sum(readings) / len(readings) / 100.0))


def report_gpu_busy(fraction, env=None, scontrol="scontrol"):
    """Tells cinch how busy the job keeps its GPU alone (0.01-1), as ``gpu_busy``."""
    env = os.environ if env is None else env
    if not 0.01 <= fraction <= 1:
        raise HelperError("the busy fraction must be from 0.01 to 1")
    _update_hints({"gpu_busy": f"{fraction:.2f}"}, env, scontrol)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    env_cmd = sub.add_parser(
        "env", help="print CINCH_GPUS, CINCH_BATCH and CINCH_LR as shell assignments"
    )
    env_cmd.add_argument("--base-batch", type=int, required=True)
    env_cmd.add_argument("--base-lr", type=float, required=True)
    env_cmd.add_argument("--base-gpus", type=int, required=True)
    env_cmd.add_argument("--max-batch", type=int, required=True)
    mem_cmd = sub.add_parser(
        "report-gpu-memory", help="write the job's measured peak GPU memory into its comment"
    )
    mem_cmd.add_argument("gib", type=float, help="peak GPU memory in GiB")
    busy_cmd = sub.add_parser(
        "report-gpu-busy",
        help="measure (nvidia-smi) or state how busy the job keeps its whole GPU, into its comment",
    )
    busy_cmd.add_argument(
        "fraction", type=float, nargs="?", help="busy fraction 0.01-1 (default: measure it)"
    )
    busy_cmd.add_argument("--samples", type=int, default=10)
    busy_cmd.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    args = parser.parse_args(argv)
    if args.command in ("report-gpu-memory", "report-gpu-busy"):
        try:
            if args.command == "report-gpu-memory":
                report_gpu_memory(args.gib)
            else:
                fraction = args.fraction
                if fraction is None:
                    fraction = measure_gpu_busy(args.samples, args.interval)
                report_gpu_busy(fraction)
                print(f"cinch_elastic: reported gpu_busy={fraction:.2f}", file=sys.stderr)
        except (HelperError, subprocess.CalledProcessError) as e:
            print(f"cinch_elastic: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        gpus = allocated_gpus()
        batch, lr = scaled(args.base_batch, args.base_lr, args.base_gpus, gpus, args.max_batch)
    except HelperError as e:
        print(f"cinch_elastic: {e}", file=sys.stderr)
        return 1
    print(f"CINCH_GPUS={gpus} CINCH_BATCH={batch} CINCH_LR={lr:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
