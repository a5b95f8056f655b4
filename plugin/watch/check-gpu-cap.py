#!/usr/bin/env python3
"""The GPU memory caps of shared jobs on a real GPU (docs/policies/sharing.md, "Memory caps by
the driver", issue 63): two PyTorch processes share one GPU, each capped at CAP MiB, one
allocating within its cap and one beyond it; records which failed and how, with the driver
version. CI has no GPU: its tests use a stand-in NVML (plugin/watch/tests/fake_nvml.c).

  plugin/watch/check-gpu-cap.py cgroup [--cap-mib 4096] [--gpu 0] [--watch target/release/cinch-watch]
  plugin/watch/check-gpu-cap.py mps [--cap-mib 4096] [--gpu 0]

cgroup: as cinch's SPANK plugin does, `cinch-watch --set-cap-mib` sets the driver's per-cgroup
limit (needs root, cgroup v2 at /sys/fs/cgroup, a driver for CUDA 13.4 or later) on two cgroups
made under /sys/fs/cgroup/cinch-cap-check, and each process moves itself into its own before
it touches CUDA. mps: as cinch's MPS prolog does, the MPS control daemon (started here if none
answers, and stopped after) and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in each process's environment.
Prints one JSON line per process and a summary line; exit status 0 when the one within its cap
kept running and the one beyond it failed with out of memory.

  (internal) check-gpu-cap.py worker CGROUP_OR_- MIB HOLD_S
"""
import json, os, subprocess, sys, time

ROOT = "/sys/fs/cgroup/cinch-cap-check"


def worker(cgroup, mib, hold_s):
    """Allocates MIB MiB on CUDA device 0 (from inside CGROUP unless '-'), holds it HOLD_S
    seconds and prints what happened."""
    if cgroup != "-":
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    import torch
    out = {"cgroup": cgroup, "asked_mib": mib}
    try:
        x = torch.empty(mib * (1 << 20), dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        out["allocated_mib"] = torch.cuda.memory_allocated() >> 20
        time.sleep(hold_s)
        out["result"] = "ran"
    except Exception as e:  # torch.OutOfMemoryError is what a cap beyond should give
        out["result"] = type(e).__name__
        out["message"] = str(e).splitlines()[0][:300]
    print(json.dumps(out), flush=True)


def driver():
    return subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True).stdout.strip()


def run_pair(cap_mib, env_for, cgroup_for):
    """Starts the process within its cap (3/4 of it) and the one beyond it (1.5x), returns
    their JSON lines."""
    procs = []
    for name, mib in (("within", cap_mib * 3 // 4), ("beyond", cap_mib * 3 // 2)):
        env = dict(os.environ, **env_for(name))
        procs.append((name, subprocess.Popen(
            [sys.executable, __file__, "worker", cgroup_for(name), str(mib), "10"],
            env=env, stdout=subprocess.PIPE, text=True)))
        time.sleep(2)
    results = {}
    for name, p in procs:
        out, _ = p.communicate(timeout=120)
        line = out.strip().splitlines()[-1] if out.strip() else "{}"
        results[name] = dict(json.loads(line), exit=p.returncode)
    return results


def check_cgroup(cap_mib, gpu, watch):
    os.makedirs(ROOT, exist_ok=True)
    # Let the driver's dmem backend see the children (where the kernel has the controller).
    try:
        with open(os.path.join(ROOT, "cgroup.subtree_control"), "w") as f:
            f.write("+dmem")
    except OSError:
        pass
    said = []
    for name in ("within", "beyond"):
        d = os.path.join(ROOT, name)
        os.makedirs(d, exist_ok=True)
        r = subprocess.run([watch, "--job-id", "0", "--set-cap-mib", str(cap_mib), "--cgroup", d,
                            "--job-cgroup", d, "--gpus", str(gpu)], capture_output=True, text=True)
        said.append({"cgroup": d, "exit": r.returncode, "said": (r.stdout + r.stderr).strip()})
    try:
        results = run_pair(cap_mib, lambda _: {}, lambda name: os.path.join(ROOT, name))
    finally:
        for name in ("within", "beyond"):
            try:
                os.rmdir(os.path.join(ROOT, name))
            except OSError:
                pass
    return said, results


def check_mps(cap_mib, gpu):
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/cinch-cap-check-mps",
           "CUDA_MPS_LOG_DIRECTORY": "/tmp/cinch-cap-check-mps-log"}
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    daemon_env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), **env)
    started = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=daemon_env,
                             capture_output=True, text=True)
    said = [{"mps_daemon": started.returncode, "said": (started.stdout + started.stderr).strip()}]
    try:
        results = run_pair(
            cap_mib,
            lambda _: dict(env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=f"0={cap_mib}M"),
            lambda _: "-")
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=daemon_env, text=True,
                       capture_output=True)
    return said, results


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "worker":
        return worker(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    import argparse
    a = argparse.ArgumentParser()
    a.add_argument("mode", choices=["cgroup", "mps"])
    a.add_argument("--cap-mib", type=int, default=4096)
    a.add_argument("--gpu", type=int, default=0)
    a.add_argument("--watch", default="target/release/cinch-watch")
    args = a.parse_args()
    os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
    if args.mode == "cgroup":
        said, results = check_cgroup(args.cap_mib, args.gpu, args.watch)
    else:
        said, results = check_mps(args.cap_mib, args.gpu)
    for line in said:
        print(json.dumps(line))
    for name, r in results.items():
        print(json.dumps(dict(r, process=name)))
    held = (results["within"].get("result") == "ran"
            and "OutOfMemory" in results["beyond"].get("result", ""))
    print(json.dumps({"mode": args.mode, "gpu": driver(), "cap_mib": args.cap_mib,
                      "cap_held": held}))
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()
