"""`--gpus all|N` for `tilerosetta test|bench|sweep`: one worker process per GPU, each pinned to its device.

The work list (bench: op x dtype x case with every backend; sweep: the configurations; test: pytest items
grouped by backend x op) is split into N shares by `assign` (deterministic, every unit exactly once). Each
share runs in the ordinary command, started as a child process with `--shard i/N` and
CUDA_VISIBLE_DEVICES=<that GPU's UUID>, so workers never share a GPU and a fault kills only one worker.
Each worker writes its own crash-safe JSON lines (bench, sweep) or junit XML (test) in <shard-dir>/gpu<i>/.
A bench worker that dies is started again with `--resume` on its own file (its current case is recorded
"crashed", the rest goes on); the others never notice. The shares are then merged into one results file
whose records each carry the GPU (index, name, UUID, host) that produced them.

Engines: "local" (threads that each wait on one child process) or "ray" (one Ray task per share asking
for one GPU, for several nodes: see docs/MULTI_GPU.md). Both run the same `run_share` function.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

FAKE_ENV = "TILEROSETTA_FAKE_GPUS"  # tests: pretend this many GPUs exist (workers then see none)
MAX_RESTARTS = 3
RAY_GET_TIMEOUT_S: float | None = None  # the CLI waits as long as the shares run; tests set a bound
# Arguments of the orchestrator itself, never forwarded to a worker.
OWN_ARGS = ("gpus", "engine", "address", "shard", "shard_dir", "resume", "out_dir", "write_best")


# ---- devices --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    index: int  # nvidia-smi's index on its host (PCI order); -1 for a CPU-only share
    name: str
    uuid: str | None
    host: str

    def visible(self) -> str:
        """The CUDA_VISIBLE_DEVICES value that shows this GPU alone (a UUID is immune to device ordering)."""
        return self.uuid or (str(self.index) if self.index >= 0 else "")

    def to_json(self) -> dict:
        return asdict(self)


def _nvidia_smi(select: str | None = None) -> list[Device] | None:
    cmd = ["nvidia-smi", "--query-gpu=index,name,uuid", "--format=csv,noheader"]
    if select:
        cmd += ["-i", select]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    host = socket.gethostname()
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    return [Device(int(r[0]), r[1], r[2] or None, host) for r in rows if len(r) >= 3 and r[0].isdigit()]


def _filter_visible(devices: list[Device], visible: str) -> list[Device]:
    """The devices a CUDA_VISIBLE_DEVICES value shows, in its order (entries: indices or UUID prefixes)."""
    out = []
    for entry in (e.strip() for e in visible.split(",")):
        match = [d for d in devices if (entry.isdigit() and d.index == int(entry))
                 or (d.uuid and entry and d.uuid.startswith(entry))]
        if not match:
            break  # CUDA ignores everything from the first invalid entry on
        out.append(match[0])
    return out


def list_devices() -> list[Device]:
    """The GPUs this process may use: nvidia-smi's list narrowed by CUDA_VISIBLE_DEVICES if set."""
    host = socket.gethostname()
    fake = os.environ.get(FAKE_ENV)
    if fake:
        return [Device(i, "fake GPU (CPU test)", f"GPU-fake-{i}", host) for i in range(int(fake))]
    devices = _nvidia_smi()
    if devices is None:  # no nvidia-smi: ask torch (this initialises CUDA in the parent, harmlessly)
        import torch

        devices = [Device(i, torch.cuda.get_device_name(i), _torch_uuid(i), host)
                   for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return devices if visible is None else _filter_visible(devices, visible)


def _torch_uuid(i: int) -> str | None:
    import torch

    u = getattr(torch.cuda.get_device_properties(i), "uuid", None)
    return f"GPU-{u}" if u else None


SETTINGS = ("clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics", "power.limit", "pci.bus_id")


def clock_settings(device: Device) -> dict:
    """What makes two GPUs of one model time differently: max and application clocks, power limit (and
    where it sits). Recorded per share; {} where nvidia-smi cannot tell (no GPU, fake devices)."""
    if device.index < 0 or not device.uuid or device.uuid.startswith("GPU-fake"):
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "-i", device.uuid, f"--query-gpu={','.join(SETTINGS)}",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(SETTINGS, values)) if out.returncode == 0 and len(values) == len(SETTINGS) else {}


def this_device() -> Device:
    """The GPU this process is pinned to (inside a Ray task: Ray sets CUDA_VISIBLE_DEVICES)."""
    host = socket.gethostname()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    first = visible.split(",")[0].strip()
    if first:
        found = _nvidia_smi(first)
        if found:
            return found[0]
        return Device(int(first) if first.isdigit() else -1, "GPU (nvidia-smi unavailable)", None, host)
    return Device(-1, "cpu (no GPU assigned)", None, host)


def pick_devices(spec: str, devices: list[Device]) -> list[Device]:
    """--gpus all|N -> the devices to use (the first N visible ones)."""
    if spec == "all":
        if not devices:
            raise ValueError("--gpus all: no GPU visible (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES hides them)")
        return devices
    try:
        n = int(spec)
    except ValueError:
        raise ValueError(f"--gpus {spec!r}: expected 'all' or a number of GPUs") from None
    if not 1 <= n <= len(devices):
        raise ValueError(f"--gpus {n}: {len(devices)} GPU(s) visible here "
                         f"({', '.join(f'{d.index}: {d.name}' for d in devices) or 'none'})")
    return devices[:n]


# ---- partition ------------------------------------------------------------------------------------
def assign(units: Sequence, n: int, weight: Callable[[object], float] = lambda u: 1.0,
           kind: Callable[[object], object] = lambda u: None) -> list[int]:
    """The share (0..n-1) of each unit: heaviest first onto the share with the least of that unit's kind
    (e.g. its backend: a slow JIT backend's groups are spread over every share), then the least in all,
    then the lowest. Deterministic for a given list (no hash(), which Python salts per process), so every
    worker computes the same split; equal weights of one kind make it round-robin in list order."""
    load = [0.0] * n
    by_kind: dict = {}
    out = [0] * len(units)
    for i in sorted(range(len(units)), key=lambda i: (-weight(units[i]), i)):
        mine = by_kind.setdefault(kind(units[i]), [0.0] * n)
        share = min(range(n), key=lambda s: (mine[s], load[s], s))
        out[i] = share
        load[share] += weight(units[i])
        mine[share] += weight(units[i])
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """'i/n' -> (i, n) with 0 <= i < n."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, e.g. 0/2") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


def my_share(items: Sequence, shard: str | None, unit: Callable = lambda x: x,
             weight: Callable = lambda u: 1.0, kind: Callable = lambda u: None) -> list:
    """The items of share i of n (all of them without --shard). Items with an equal unit stay together."""
    if not shard:
        return list(items)
    i, n = parse_shard(shard)
    units = list(dict.fromkeys(unit(x) for x in items))
    mine = {u for u, s in zip(units, assign(units, n, weight, kind)) if s == i}
    return [x for x in items if unit(x) in mine]


def bench_share(plan: list, shard: str | None) -> list:
    """Bench: the unit is (op, dtype, case) with every backend, so a case's reference is computed once
    and the speedup over torch compares two timings from the same GPU."""
    from tilerosetta.specs import dtype_name

    return my_share(plan, shard, unit=lambda p: (p[0].name, dtype_name(p[1]), p[2].name))


def sweep_picker(shard: str | None) -> Callable[[list], list] | None:
    """Sweep: the explicit configurations are split; every share also times the default (the baseline
    on its own GPU), which sweep_case always runs."""
    if not shard:
        return None
    return lambda space: my_share(space, shard, unit=lambda cfg: json.dumps(cfg, sort_keys=True))


# ---- arguments ------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser, worker_shard: bool = True) -> None:
    """The --gpus/--engine/--address/--shard-dir options of test, bench and sweep, and the worker's hidden
    --shard i/n (test passes its share to pytest after `--` instead)."""
    g = p.add_argument_group("several GPUs (docs/MULTI_GPU.md)")
    g.add_argument("--gpus", default="", metavar="all|N",
                   help="one worker process per GPU, each pinned to its device; results merged (default: "
                        "one process, the current device)")
    g.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: the GPUs of this node; ray: one Ray task per GPU of a Ray cluster")
    g.add_argument("--address", default="",
                   help="with --engine ray: the cluster (auto, ray://host:10001, host:6379); default: start a "
                        "local one")
    g.add_argument("--shard-dir", default="", help="where the workers write (default: beside the results)")
    if worker_shard:
        g.add_argument("--shard", default="", help=argparse.SUPPRESS)  # i/n: set by the orchestrator
    p.set_defaults(_parser=p)


def forward_argv(args, drop: Iterable[str] = OWN_ARGS) -> list[str]:
    """Rebuild a worker's command-line options from the parsed namespace (every option of the subcommand
    whose value is not its default), so options added to a command later are forwarded too."""
    drop = set(drop)
    out, positional = [], []
    for action in args._parser._actions:
        dest = action.dest
        if dest in drop or dest in ("help", "func", "_parser") or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if not action.option_strings:
            positional += list(value) if isinstance(value, list) else [str(value)]
            continue
        if value == action.default or value is None:
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            out.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out + (["--", *positional] if positional else [])


# ---- running one share ----------------------------------------------------------------------------
@dataclass
class Job:
    """One share: `argv` (after the interpreter) runs it; "{workdir}" in argv is replaced by its folder."""
    command: str  # test | bench | sweep
    shard: int
    total: int
    argv: list[str]
    resumable: bool = False  # bench: after a death, run again with --resume <its results file>
    extra_env: dict = field(default_factory=dict)


@dataclass
class Outcome:
    shard: int
    device: Device
    rc: int
    restarts: int
    wall_s: float
    workdir: str
    settings: dict = field(default_factory=dict)  # clock_settings of the device, read before the run
    files: dict = field(default_factory=dict)  # name -> text, only when returned from a remote node


def _results_file(workdir: Path) -> Path | None:
    files = sorted(workdir.glob("*.jsonl"))
    return files[0] if files else None


def run_share(job: Job, device: Device, workdir: Path, prefix: Sequence[str] | None = None,
              pin: bool = True) -> Outcome:
    """Run one share to its end, in its own process(es), pinned to `device`; restart a resumable share
    that died (signal, or an exit other than 0/1/2) on its own results file, at most MAX_RESTARTS times."""
    workdir.mkdir(parents=True, exist_ok=True)
    prefix = list(prefix or [sys.executable, "-m", "tilerosetta"])
    env = dict(os.environ, PYTHONUNBUFFERED="1", **job.extra_env)
    if pin:
        env["CUDA_VISIBLE_DEVICES"] = device.visible()
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # indices then mean what nvidia-smi means
    argv = [a.replace("{workdir}", str(workdir)) for a in job.argv]
    settings = clock_settings(device)
    t0, restarts = time.monotonic(), 0
    with open(workdir / "worker.log", "a", encoding="utf-8") as log:
        while True:
            log.write(f"== {' '.join(prefix + argv)}  (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')})\n")
            log.flush()
            rc = subprocess.run(prefix + argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL).returncode
            died = rc < 0 or rc > 2  # a signal (kernel fault, OOM killer) or an abort, not a verdict
            found = _results_file(workdir)
            if not (job.resumable and died and restarts < MAX_RESTARTS and found):
                break
            restarts += 1
            log.write(f"== worker died (exit {rc}); restart {restarts}/{MAX_RESTARTS} with --resume {found}\n")
            argv = _without_option(argv, "--resume") + ["--resume", str(found)]
    return Outcome(job.shard, device, rc, restarts, round(time.monotonic() - t0, 1), str(workdir), settings)


def _without_option(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        else:
            out.append(a)
    return out


def run_local(jobs: list[Job], devices: list[Device], shard_dir: Path, prefix: Sequence[str] | None = None,
              on_done: Callable[[Outcome], None] = lambda o: None) -> list[Outcome]:
    """Every share at once, one thread waiting on each worker process; on_done as each one ends."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(run_share, job, dev, shard_dir / f"gpu{job.shard}", prefix)
                   for job, dev in zip(jobs, devices)]
        for f in as_completed(futures):
            on_done(f.result())
        return sorted((f.result() for f in futures), key=lambda o: o.shard)


# ---- Ray ------------------------------------------------------------------------------------------
def python_path() -> str:
    """PYTHONPATH for Ray's workers: this checkout's python/ folder first (the same path on every node: a
    shared file system or the same image), then the driver's own PYTHONPATH."""
    return os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))


def _ray_share(job: Job) -> Outcome:
    """Inside a Ray task: run the share in a scratch folder on that node (Ray pinned the task to its GPU),
    return the outcome with the files the worker wrote (the driver's disk may be on another node)."""
    os.environ.update(job.extra_env)
    work = Path(tempfile.mkdtemp(prefix=f"tilerosetta-shard{job.shard}-"))
    try:
        out = run_share(job, this_device(), work, pin=False)
        out.files = {p.name: p.read_text(encoding="utf-8", errors="replace")
                     for p in work.iterdir() if p.is_file() and p.suffix in (".jsonl", ".xml", ".log")}
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ray_share_count(address: str, gpus: str) -> tuple[int, float]:
    """(number of shares, GPUs per task) for --engine ray: 'all' = the cluster's GPUs; a cluster without
    GPUs runs N CPU shares (num_gpus=0), which is what CI does."""
    import ray

    total = int(ray.cluster_resources().get("GPU", 0))
    if gpus == "all":
        if not total:
            raise ValueError(f"--gpus all: the Ray cluster at {address or 'local'} has no GPU; give --gpus N "
                             f"for N CPU-only shares")
        return total, 1.0
    n = int(gpus)
    if total and n > total:
        raise ValueError(f"--gpus {n}: the Ray cluster has {total} GPU(s)")
    return n, (1.0 if total else 0.0)


def run_ray(jobs: list[Job], num_gpus: float, shard_dir: Path) -> list[Outcome]:
    """One Ray task per share (num_gpus each); the files each returns are written under shard_dir/gpu<i>/."""
    import ray

    task = ray.remote(num_gpus=num_gpus, max_retries=1)(_ray_share)
    if not num_gpus:  # a CPU share (CI): Ray leaves CUDA_VISIBLE_DEVICES alone then, so hide every GPU
        for job in jobs:
            job.extra_env["CUDA_VISIBLE_DEVICES"] = ""
    outcomes = ray.get([task.remote(job) for job in jobs], timeout=RAY_GET_TIMEOUT_S)
    for out in outcomes:
        local = shard_dir / f"gpu{out.shard}"
        local.mkdir(parents=True, exist_ok=True)
        for name, text in out.files.items():
            (local / name).write_text(text, encoding="utf-8")
        out.workdir, out.files = str(local), {}
    return outcomes


def ray_session(address: str):
    """A context manager: connect to (or start) a Ray cluster unless one is connected already."""
    import contextlib

    import ray

    @contextlib.contextmanager
    def session():
        started = not ray.is_initialized()
        if started:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": python_path()}})
        try:
            yield ray
        finally:
            if started:
                ray.shutdown()
    return session()


def run_jobs(args, jobs_for: Callable[[int], list[Job]], shard_dir: Path, console,
             prefix: Sequence[str] | None = None) -> list[Outcome]:
    """Pick the devices (or the Ray cluster), build the jobs, run them, say where each went."""
    def say(o: Outcome):
        d = o.device
        console.print(f"  share {o.shard}: {d.host} GPU {d.index} {d.name} {d.uuid or ''}: exit {o.rc}"
                      + (f" after {o.restarts} restart(s)" if o.restarts else "") + f", {o.wall_s:.0f} s",
                      highlight=False)

    if args.engine == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ValueError("--engine ray needs Ray: pip install 'ray==2.60.0' (docs/MULTI_GPU.md)") from None
        with ray_session(args.address):
            n, per_task = ray_share_count(args.address, args.gpus)
            jobs = jobs_for(n)
            console.print(f"{n} share(s) as Ray tasks ({per_task:g} GPU each) -> {shard_dir}", highlight=False)
            outcomes = run_ray(jobs, per_task, shard_dir)
        for o in outcomes:
            say(o)
    else:
        devices = pick_devices(args.gpus, list_devices())
        jobs = jobs_for(len(devices))
        console.print(f"{len(devices)} worker(s), one per GPU -> {shard_dir}", highlight=False)
        outcomes = run_local(jobs, devices, shard_dir, prefix, on_done=say)
    return outcomes


# ---- merging ----------------------------------------------------------------------------------------
STAMPED = ("result", "start", "launch", "ceilings", "resume")


def gpu_differences(outcomes: list[Outcome]) -> list[str]:
    """Why the shares' timings may not be comparable one-to-one: models or clock settings that differ."""
    out = []
    names = sorted({o.device.name for o in outcomes})
    if len(names) > 1:
        out.append(f"GPU models differ: {', '.join(names)}")
    for key in SETTINGS[:-1]:  # the bus id differs by nature
        values = sorted({o.settings.get(key) for o in outcomes if o.settings})
        if len(values) > 1:
            out.append(f"{key} differs: {', '.join(map(str, values))}")
    return out


def _gpu_label(outcomes: list[Outcome]) -> str:
    """The name part of a merged file: the GPU model, "mixed-gpus", or "cpu" for CPU-only shares."""
    from tilerosetta.bench import results as res_mod

    for o in outcomes:
        f = _results_file(Path(o.workdir))
        if f and res_mod.load(f).cpu_only:
            return "cpu"
    names = sorted({o.device.name for o in outcomes})
    return names[0] if len(names) == 1 else "mixed-gpus"


def merge_results(outcomes: list[Outcome], path: Path, engine: str, wall_s: float) -> Path:
    """One results file from the shares' files: the first share's meta (with every share's GPU, exit and
    file), then every record of every share, each stamped with its share and GPU. A case a share started
    but never finished (its worker gave up) is recorded "crashed"."""
    from tilerosetta.bench import results as res_mod
    from tilerosetta.bench.runner import crashed_records

    meta, body, shares = None, [], []
    for o in sorted(outcomes, key=lambda o: o.shard):
        f = _results_file(Path(o.workdir))
        info = {"shard": o.shard, "gpu": o.device.to_json(), "settings": o.settings, "exit": o.rc,
                "restarts": o.restarts, "wall_s": o.wall_s, "file": str(f) if f else None}
        shares.append(info)
        if f is None:
            continue
        loaded = res_mod.load(f)
        info["results"] = len(loaded.results)
        meta = meta or dict(loaded.meta)
        stamp = {"shard": o.shard, "gpu": o.device.to_json()}
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line (res_mod.load counted it)
            if rec.get("type") in STAMPED:
                body.append({**rec, **stamp})
        body += [{**r, **stamp} for r in crashed_records(loaded.started)]
    meta = dict(meta or {"type": "meta", "schema": res_mod.SCHEMA, "date": res_mod.now_iso(), "fixture": False})
    meta["shards"] = shares
    meta["sharding"] = {"engine": engine, "shares": len(outcomes), "wall_s": round(wall_s, 1),
                        "gpus": sorted({o.device.name for o in outcomes}), "differences": gpu_differences(outcomes)}
    with res_mod.ResultsWriter(path) as w:
        for rec in [meta, *body]:
            w.write(rec)
    return path


def junit_totals(xml_path: Path) -> dict:
    """passed/failed/errors/skipped of one junit XML file (pytest --junitxml)."""
    root = ET.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    t = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": t["tests"] - t["failures"] - t["errors"] - t["skipped"], "failed": t["failures"],
            "errors": t["errors"], "skipped": t["skipped"]}


def junit_failures(xml_path: Path) -> list[str]:
    """'file::test[params]: first line of the message' of every failed or erroring test case."""
    out = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        bad = case.find("failure")
        bad = bad if bad is not None else case.find("error")
        if bad is not None:
            msg = (bad.get("message") or "").splitlines()
            out.append(f"{case.get('classname')}::{case.get('name')}: {msg[0][:200] if msg else ''}")
    return out


# ---- the three commands ---------------------------------------------------------------------------
def _shard_dir(args, default: Path) -> Path:
    d = Path(args.shard_dir) if args.shard_dir else default
    d.mkdir(parents=True, exist_ok=True)
    return d


def _console():
    from rich.console import Console

    return Console()


def _out_dir(args) -> Path:
    """--out-dir, else where the command itself would write: bench/results/ for GPU runs, build/cpu-results/
    (ignored by git) for --allow-cpu runs on a machine without a GPU."""
    if args.out_dir:
        return Path(args.out_dir)
    import torch

    from tilerosetta.bench.results import default_out_dir

    return default_out_dir(bool(getattr(args, "allow_cpu", False)) and not torch.cuda.is_available())


def _run_and_merge(args, command, jobs_for, shard_dir, out_dir, console, prefix, name_prefix=""):
    """Run the shares and merge what they wrote into one new results file: (outcomes, path), or the exit
    code when nothing can be merged (bad arguments: 2; no share wrote results: the workers' code)."""
    from tilerosetta.bench import results as res_mod

    t0 = time.monotonic()
    try:
        outcomes = run_jobs(args, jobs_for, shard_dir, console, prefix)
    except ValueError as exc:
        console.print(f"[red]tilerosetta {command} --gpus:[/] {exc}", highlight=False)
        return 2
    if not any(_results_file(Path(o.workdir)) for o in outcomes):
        console.print(f"[red]no share wrote results[/]: see {shard_dir}/gpu*/worker.log")
        return max(o.rc for o in outcomes) or 1
    path = res_mod.new_results_path(out_dir, _gpu_label(outcomes), prefix=name_prefix)
    merge_results(outcomes, path, args.engine, time.monotonic() - t0)
    return outcomes, path


def run_bench(args, prefix: Sequence[str] | None = None) -> int:
    """`tilerosetta bench --gpus ...`: shares of (op, dtype, case), merged; `--resume SHARD_DIR` goes on
    with the shares' own files."""
    from tilerosetta.bench import results as res_mod

    console = _console()
    resume = Path(args.resume) if args.resume else None
    if resume and not resume.is_dir():
        console.print(f"[red]--gpus with --resume[/]: give the shard folder of the run ({resume} is not one)")
        return 2
    out_dir = _out_dir(args)
    shard_dir = resume or _shard_dir(args, out_dir / f"shards-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if resume and args.engine == "ray":
        console.print("[red]--resume with --engine ray[/]: the shares' files live on the nodes that ran them")
        return 2
    base = ["bench", *forward_argv(args)]

    def jobs_for(n):
        if resume and len(list(shard_dir.glob("gpu*/*.jsonl"))) > n:
            raise ValueError(f"{shard_dir} holds more shares than --gpus {n}: resume with the same --gpus")
        jobs = []
        for i in range(n):
            prev = _results_file(shard_dir / f"gpu{i}") if resume else None
            tail = ["--resume", str(prev)] if prev else ["--out-dir", "{workdir}"]
            jobs.append(Job("bench", i, n, base + ["--shard", f"{i}/{n}"] + tail, resumable=True))
        return jobs

    done = _run_and_merge(args, "bench", jobs_for, shard_dir, out_dir, console, prefix)
    if isinstance(done, int):
        return done
    outcomes, path = done
    from tilerosetta.commands.bench import print_summary

    print_summary(console, res_mod.load(path))
    for why in gpu_differences(outcomes):
        console.print(f"[yellow]not one-to-one comparable across shares:[/] {why}", highlight=False)
    console.print(f"shards:  {shard_dir}\nresults: {path}\nreport:  tilerosetta report {path}", highlight=False)
    return 0 if all(o.rc == 0 for o in outcomes) else 1


def run_sweep(args, prefix: Sequence[str] | None = None) -> int:
    """`tilerosetta sweep --gpus ...`: the configurations split over the GPUs (each also times the default),
    merged into one sweep file; --write-best then picks from all of them."""
    from tilerosetta.bench import results as res_mod
    from tilerosetta.bench import sweep as sweep_mod
    from tilerosetta import toolchain

    console = _console()
    out_dir = _out_dir(args)
    shard_dir = _shard_dir(args, out_dir / f"shards-sweep-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    base = ["sweep", *forward_argv(args)]

    def jobs_for(n):
        return [Job("sweep", i, n, base + ["--shard", f"{i}/{n}", "--out-dir", "{workdir}"]) for i in range(n)]

    done = _run_and_merge(args, "sweep", jobs_for, shard_dir, out_dir, console, prefix,
                          name_prefix=f"sweep-{args.backend}-{args.op}-{args.dtype}-")
    if isinstance(done, int):
        return done
    outcomes, path = done
    records = _records(path)
    recs = [r for r in records if r.get("type") == "result"]
    if args.write_best and records[0].get("cpu_only"):
        console.print("[red]refusing --write-best with CPU timings[/]: tuned_configs.json holds GPU results only")
        args.write_best = False
    for case in dict.fromkeys(r["case"] for r in recs):
        mine = [r for r in recs if r["case"] == case]
        ok = sorted((r for r in mine if r.get("status") == "ok" and not r.get("sweep_default")),
                    key=lambda r: r["timing"]["median_ms"])
        console.print(f"{case}: {len(mine)} record(s), {len(ok)} correct configuration(s)"
                      + (f"; fastest {sweep_mod.config_label(ok[0]['config'])} "
                         f"{ok[0]['timing']['median_ms']:.4f} ms on GPU {ok[0]['gpu']['index']}" if ok else ""),
                      highlight=False)
        sweep_mod.plot(mine, path.with_name(f"{path.stem}-{case}.png"),
                       f"{args.backend} {args.op} {args.dtype} {case} ({len(outcomes)} GPUs)")
        if args.write_best and ok:
            # the default measured on the winner's GPU is the baseline the winner must beat
            baseline = [r for r in mine if r.get("sweep_default") and r.get("shard") == ok[0].get("shard")]
            key = sweep_mod.write_best(baseline + ok, toolchain.device_arch(), path.name)
            console.print(f"tuned_configs.json: {key or 'nothing written (no configuration beat the default)'}")
    console.print(f"shards:  {shard_dir}\nresults: {path}", highlight=False)
    return 0 if all(o.rc == 0 for o in outcomes) else 1


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def run_test(args, prefix: Sequence[str] | None = None) -> int:
    """`tilerosetta test --gpus ...`: one pytest process per GPU on its share of the items (conftest.py
    --shard), junit XML per share, one summary line."""
    console = _console()
    shard_dir = _shard_dir(args, Path(tempfile.mkdtemp(prefix="tilerosetta-test-shards-")))
    base = ["test", *forward_argv(args)]
    if "--" not in base:
        base.append("--")

    def jobs_for(n):
        return [Job("test", i, n, base + ["--shard", f"{i}/{n}", "--junitxml={workdir}/junit.xml"])
                for i in range(n)]

    t0 = time.monotonic()
    try:
        outcomes = run_jobs(args, jobs_for, shard_dir, console, prefix)
    except ValueError as exc:
        console.print(f"[red]tilerosetta test --gpus:[/] {exc}", highlight=False)
        return 2
    total = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    bad = []
    for o in outcomes:
        xml = Path(o.workdir) / "junit.xml"
        if not xml.exists():
            bad.append(o.shard)
            console.print(f"  share {o.shard}: no junit XML (worker exit {o.rc}); see {o.workdir}/worker.log",
                          highlight=False)
            continue
        t = junit_totals(xml)
        console.print(f"  share {o.shard}: " + ", ".join(f"{v} {k}" for k, v in t.items()), highlight=False)
        for line in junit_failures(xml)[:30]:
            console.print(f"    FAILED {line}", highlight=False, markup=False)
        for k in total:
            total[k] += t[k]
    console.print(f"shards: {shard_dir} (junit.xml and worker.log per GPU), {time.monotonic() - t0:.0f} s",
                  highlight=False)
    line = f"{total['passed']} passed, {total['failed'] + total['errors']} failed, {total['skipped']} skipped"
    print(line + (f" ({len(bad)} share(s) died without a report: {bad})" if bad else ""), flush=True)
    failed = bad or total["failed"] or total["errors"] or any(o.rc not in (0, 5) for o in outcomes)
    return 1 if failed else 0
