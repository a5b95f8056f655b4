"""Tests of the elastic-job helper (run by tests/run: python3 -m unittest discover plugin/python)."""

import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cinch_elastic as ce  # noqa: E402


def fake_scontrol(directory, show_output, log):
    """An `scontrol` that prints `show_output` for `show job` and logs `update` calls."""
    path = os.path.join(directory, "scontrol")
    with open(path, "w") as f:
        f.write(
            textwrap.dedent(
                f"""\
                #!/bin/sh
                if [ "$1" = show ]; then printf '%s\\n' {show_output!r}; exit 0; fi
                printf '%s\\n' "$@" >> {log!r}
                """
            )
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class Allocation(unittest.TestCase):
    def test_slurms_record_of_the_allocation_wins(self):
        with tempfile.TemporaryDirectory() as d:
            scontrol = fake_scontrol(
                d,
                "JobId=7 JobName=x AllocTRES=cpu=4,mem=1G,node=2,billing=4,gres/gpu=8 Comment=(null)",
                os.path.join(d, "log"),
            )
            env = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_NUM_NODES": "1"}
            self.assertEqual(ce.allocated_gpus(env, scontrol), 8)

    def test_the_total_request_counts_where_gpus_are_not_accounted(self):
        with tempfile.TemporaryDirectory() as d:
            scontrol = fake_scontrol(
                d,
                "JobId=7 TRES=cpu=1,node=1,billing=1 TresPerJob=gres:gpu:a100:16 Comment=x",
                os.path.join(d, "log"),
            )
            self.assertEqual(ce.allocated_gpus({"SLURM_JOB_ID": "7"}, scontrol), 16)

    def test_without_scontrol_the_environment_says(self):
        env = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "3"}
        self.assertEqual(ce.allocated_gpus(env, "/nonexistent/scontrol"), 12)
        self.assertEqual(ce.allocated_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}), 3)
        with self.assertRaises(ce.HelperError):
            ce.allocated_gpus({})


class Scaling(unittest.TestCase):
    def test_linear_up_to_the_cap_and_the_rate_follows_the_batch(self):
        self.assertEqual(ce.scaled(256, 0.1, 4, 8, 4096), (512, 0.2))
        self.assertEqual(ce.scaled(256, 0.1, 4, 2, 4096), (128, 0.05))
        batch, lr = ce.scaled(256, 0.1, 4, 64, 1024)
        self.assertEqual(batch, 1024)
        self.assertAlmostEqual(lr, 0.4)
        with self.assertRaises(ce.HelperError):
            ce.scaled(256, 0.1, 0, 4, 1024)

    def test_the_rule_is_the_one_the_core_implements(self):
        # Mirrors cinch_core::elastic::scaled_batch's own test cases.
        for args, want in [((256, 0.1, 4, 8, 4096), 512), ((3, 1.0, 2, 1, 100), 1)]:
            self.assertEqual(ce.scaled(*args)[0], want)


class Checkpoints(unittest.TestCase):
    def test_a_checkpoint_round_trips_and_none_gives_the_default(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.json")
            self.assertEqual(ce.load_checkpoint(path, {"step": 0}), {"step": 0})
            ce.save_checkpoint(path, {"step": 42})
            self.assertEqual(ce.load_checkpoint(path), {"step": 42})
            self.assertEqual(os.listdir(d), ["ckpt.json"], "no temporary file left behind")

    def test_sigterm_saves_once_and_exits(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.json")
            script = textwrap.dedent(
                f"""\
                import sys, time
                sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
                import cinch_elastic as ce
                step = 0
                ce.CheckpointOnSignal(lambda: ce.save_checkpoint({path!r}, {{"step": step}}))
                while True:
                    step += 1
                    if step == 1:
                        # Only now is there a step to save: a signal before this
                        # point would rightly save step 0.
                        print("ready", flush=True)
                    time.sleep(0.01)
                """
            )
            proc = subprocess.Popen(
                [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
            )
            self.assertEqual(proc.stdout.readline().strip(), "ready")
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0)
            proc.stdout.close()
            self.assertGreater(ce.load_checkpoint(path)["step"], 0)


class Progress(unittest.TestCase):
    def test_hints_are_merged_into_the_comment_keeping_the_rest(self):
        merged = ce.merge_hints("team-a cinch:app=bert,elastic=2-8,ckpt=yes", {"iters_done": 5})
        self.assertEqual(merged, "team-a cinch:app=bert,elastic=2-8,ckpt=yes,iters_done=5")
        self.assertEqual(ce.merge_hints("", {"a": 1}), "cinch:a=1")

    def test_progress_is_written_with_scontrol_update(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "log")
            scontrol = fake_scontrol(
                d, "JobId=9 Comment=cinch:app=bert,elastic=2-8,ckpt=yes AllocTRES=gres/gpu=4", log
            )
            ce.report_progress(0.25, 0.001, 4, {"SLURM_JOB_ID": "9"}, scontrol)
            with open(log) as f:
                calls = f.read().split("\n")
            self.assertEqual(calls[0], "update")
            self.assertEqual(calls[1], "JobId=9")
            self.assertEqual(
                calls[2],
                "Comment=cinch:app=bert,elastic=2-8,ckpt=yes,iters=1000,iters_done=250,"
                "iter_rate=1,rate_gpus=4",
            )
            with self.assertRaises(ce.HelperError):
                ce.report_progress(1.5, 0.001, 4, {"SLURM_JOB_ID": "9"}, scontrol)


    def test_the_gpu_memory_peak_is_written_with_scontrol_update(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "log")
            scontrol = fake_scontrol(d, "JobId=9 Comment=cinch:app=bert,share=yes", log)
            ce.report_gpu_memory(12.25, {"SLURM_JOB_ID": "9"}, scontrol)
            with open(log) as f:
                calls = f.read().split("\n")
            self.assertEqual(
                calls[:3],
                ["update", "JobId=9", "Comment=cinch:app=bert,share=yes,gpu_mem_peak=12.25G"],
            )
            for bad in (0, -1, 5000):
                with self.assertRaises(ce.HelperError):
                    ce.report_gpu_memory(bad, {"SLURM_JOB_ID": "9"}, scontrol)
            with self.assertRaises(ce.HelperError):
                ce.report_gpu_memory(1, {}, scontrol)

    def test_the_busy_fraction_is_measured_on_a_whole_gpu_and_written(self):
        with tempfile.TemporaryDirectory() as d:
            smi = os.path.join(d, "nvidia-smi")
            calls = os.path.join(d, "smi-calls")
            with open(smi, "w") as f:
                # Readings 40, 60, 80 in turn; logs its arguments.
                f.write(textwrap.dedent(f"""\
                    #!/bin/sh
                    printf '%s\\n' "$*" >> {calls!r}
                    n=$(wc -l < {calls!r})
                    echo $((20 + 20 * n))
                    """))
            os.chmod(smi, 0o755)
            env = {"SLURM_JOB_ID": "9", "CUDA_VISIBLE_DEVICES": "2"}
            busy = ce.measure_gpu_busy(3, 0.5, env, smi, sleep=lambda s: None)
            self.assertAlmostEqual(busy, 0.6)
            with open(calls) as f:
                self.assertIn("-i 2", f.read())
            log = os.path.join(d, "log")
            scontrol = fake_scontrol(d, "JobId=9 Comment=cinch:app=bert,share=yes", log)
            ce.report_gpu_busy(busy, env, scontrol)
            with open(log) as f:
                self.assertIn("Comment=cinch:app=bert,share=yes,gpu_busy=0.60", f.read())
            # On shards the GPU's utilisation is not the job's; two GPUs, none: refused.
            for bad in ({"SLURM_SHARDS_ON_NODE": "3", "CUDA_VISIBLE_DEVICES": "0"},
                        {"CUDA_VISIBLE_DEVICES": "0,1"}, {}):
                with self.assertRaises(ce.HelperError):
                    ce.measure_gpu_busy(1, 0, bad, smi, sleep=lambda s: None)
            with self.assertRaises(ce.HelperError):
                ce.measure_gpu_busy(1, 0, {"CUDA_VISIBLE_DEVICES": "0"},
                                    os.path.join(d, "missing"), sleep=lambda s: None)
            for bad in (0, 1.5):
                with self.assertRaises(ce.HelperError):
                    ce.report_gpu_busy(bad, env, scontrol)


class CommandLine(unittest.TestCase):
    def test_env_prints_shell_assignments(self):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", PATH="/nonexistent")
        env.pop("SLURM_JOB_ID", None)
        env.pop("SLURM_GPUS_ON_NODE", None)
        out = subprocess.run(
            [sys.executable, ce.__file__, "env", "--base-batch", "256", "--base-lr", "0.1",
             "--base-gpus", "4", "--max-batch", "4096"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout
        self.assertEqual(out.strip(), "CINCH_GPUS=2 CINCH_BATCH=128 CINCH_LR=0.05")


if __name__ == "__main__":
    unittest.main()
