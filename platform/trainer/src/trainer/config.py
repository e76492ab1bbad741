"""The run's configuration: Hydra composition (compose API), then a typed, checked schema.

Hydra is used only to compose: defaults lists, dotted overrides, `+` for new
keys. It does not change the working directory or take over logging. Bad
values are one line: where, what, how to fix (ConfigError).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal

from contract import codec, spares
from contract.codec import setting
from contract.names import PEAK_TFLOPS_ENV, TRAINER_METRICS_PORT, is_dns1035_label
from contract.problem import Invalid
from trainer.rl.settings import RL
from trainer.rl.settings import check as check_rl

# Upper bounds: far above any real run, low enough that a slip of a few digits (a billion steps, a batch
# that never fits) is refused at start in one line instead of failing hours later or never.
MAX_STEPS = 100_000_000
MAX_GROUPS = 4096  # replica groups of one run (its spares: contract.spares)
MAX_GROUP_SIZE = 4096  # ranks (GPUs) in one replica group
MAX_WIDTH = 1 << 16  # model.d_model
MAX_WAIT_S = 86_400.0  # any timeout or delay: a day
MAX_LR = 100.0
MAX_SEED = (1 << 32) - 1  # what every RNG the trainer seeds takes
# ft.max_restarts' default: a group restarted 3 times in one run rides out a node loss, a preemption and a bad
# host; one that keeps dying is a bug, not a fault to ride out (an RL generator's bound, rl.max_restarts, is the same).
MAX_RESTARTS = 3


class ConfigError(Exception):
    """One line per problem for the user: the key, what is wrong, how to fix it."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Run:
    name: str
    steps: int = setting(300, low=1, high=MAX_STEPS)
    seed: int = setting(0, low=0, high=MAX_SEED)
    log_every: int = setting(20, low=1, high=MAX_STEPS)
    launcher: Literal["local", "ray"] = "local"
    # pretrain: next-token loss on data.*; rl: GRPO with generators (rl.*, trainer/rl/README.md)
    mode: Literal["pretrain", "rl"] = "pretrain"
    report_dir: str = "/tmp/meridian-runs"
    # A group that sees a non-finite loss or gradient norm this many attempts in a row stops (exit 3).
    max_nonfinite_steps: int = setting(3, low=1, high=1000)
    # Fault injection, for tests and drills only: the loss of inner step N (1-based; 0: never) is NaN
    # for the first `inject_nan_times` attempts of that step in each replica-group process.
    inject_nan_at_step: int = setting(0, low=0, high=MAX_STEPS)
    inject_nan_times: int = setting(1, low=1, high=1000)
    # Rank 0 of each group serves contract.metrics.TRAINER here (0: any free port; -1: off); when taken (groups
    # sharing a machine) it falls back to a free one. The bound port is in the run dir: metrics-<group>.port.
    metrics_port: int = setting(TRAINER_METRICS_PORT, low=-1, high=65535)


@dataclass(frozen=True)
class FaultTolerance:
    # false: one replica group trains alone, without torchft (no Lighthouse, no Manager, no healing);
    # checkpoints and resume work the same.
    enabled: bool = True
    replica_groups: int = setting(2, low=1, high=MAX_GROUPS)
    # Ranks (processes; one per GPU) in each replica group: the group shards the model among them with
    # FSDP2, and torchft averages each shard across groups (HSDP). World = replica_groups x group_size.
    group_size: int = setting(1, low=1, high=MAX_GROUP_SIZE)
    min_replicas: int = setting(1, low=1, high=MAX_GROUPS)
    restart_failed: bool = True
    max_restarts: int = setting(
        MAX_RESTARTS, low=0, high=1000
    )  # per replica group, by either launcher; then the run fails
    timeout_s: float = setting(30, above=0, high=MAX_WAIT_S)
    quorum_timeout_s: float = setting(60, above=0, high=MAX_WAIT_S)
    heartbeat_timeout_ms: int = setting(5000, low=1, high=MAX_WAIT_S * 1000)
    # The local launcher waits this long before restarting a dead group, so the Lighthouse has
    # dropped the dead member (heartbeat timeout) and the survivors have re-formed the quorum.
    restart_delay_s: float = setting(5.0, above=0, high=MAX_WAIT_S)
    # Under Ray: extra replica groups' worth of workers the run holds placed and idle (gkr renders the RayJob with
    # (replica_groups + spare_groups) x group_size workers), so a dead group's replacement starts at once on
    # healthy capacity instead of waiting for its node (launch/ray_supervisor.py). The local launcher ignores it.
    spare_groups: int = setting(0, low=0, high=spares.MAX)  # and at most replica_groups: contract.spares
    device: Literal["cpu", "cuda"] = "cpu"
    # Link emulator (distributed/link.py): each cross-group all-reduce completes no earlier than over a link of this
    # round-trip time and bandwidth (Gbit/s per group). 0: off (the default). For measurements, not production.
    link_rtt_ms: float = setting(0.0, low=0, high=60_000)
    link_gbps: float = setting(0.0, low=0, high=100_000)
    # --- A run across regions (issue 19; distributed/regions.py) ---
    # The run's Lighthouse (http://host:port; default $TORCHFT_LIGHTHOUSE): set, no launcher starts one.
    lighthouse: str = ""
    # This launcher's region (default $MERIDIAN_REGION): replica ids become "<region>/<group>".
    region: str = ""
    # Across groups: auto = gloo over the pod network when ft.region is set (RDMA does not cross regions),
    # else NCCL on GPU; gloo on CPU always.
    cross_group_backend: Literal["auto", "nccl", "gloo"] = "auto"
    # The run's TLS identity (a folder with ca.crt, tls.crt, tls.key; default $MERIDIAN_RUN_TLS, which gkr sets for a
    # run across regions): set, each group reaches ft.lighthouse only over mutual TLS with it (distributed/mtls.py), and the groups
    # all-reduce over a ring on the same mutual TLS instead of gloo or NCCL (distributed/tls_pg.py).
    lighthouse_tls: str = ""
    # Rank 0's torchft Manager serves its gRPC on this port (torchft's Manager(port=)); 0: any free port. The Ray
    # launcher sets names.MANAGER_PORTS[the group's slot on its node] for a run across regions (regions.manager_port).
    manager_port: int = setting(0, low=0, high=65535)


@dataclass(frozen=True)
class Checkpoint:
    dir: str
    every: int = setting(100, low=1, high=MAX_STEPS)
    keep: int = setting(3, low=1, high=1000)
    # Train from step 0 although checkpoint.dir has step data of which nothing verifies (refused
    # otherwise). It deletes nothing up front; a verified checkpoint, if any, is still resumed from.
    start_over: bool = False
    # --- A run across regions (issue 19; checkpoint/resume.py) ---
    # Other regions' checkpoint dirs (default $MERIDIAN_RESUME_FROM, comma-separated): read, never written;
    # resume takes the newest verified checkpoint of these and of dir.
    resume_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer (model/transformer.py); the sizes are configs/model/*.yaml."""

    vocab: int = setting(256, low=1, high=1 << 22)
    d_model: int = setting(64, low=1, high=MAX_WIDTH)
    layers: int = setting(2, low=1, high=1024)
    heads: int = setting(4, low=1, high=1024)
    kv_heads: int = setting(0, low=0, high=1024)  # grouped-query attention: key/value heads (0: as many as heads)
    ffn_dim: int = setting(
        0, low=0, high=4 * MAX_WIDTH
    )  # SwiGLU hidden width (0: 8/3 of d_model, rounded up to a multiple of 64)
    seq_len: int = setting(64, low=1, high=1 << 20)
    rope_theta: float = setting(10000.0, above=0, high=1e12)
    norm_eps: float = setting(1e-5, above=0, below=1)
    dropout: float = setting(0.0, low=0, below=1)
    # auto: bf16 autocast on CUDA, fp32 on CPU; bf16: autocast anywhere; fp32: never. Parameters stay fp32.
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    activation_checkpointing: bool = False  # recompute each block in the backward pass (less memory)


@dataclass(frozen=True)
class Data:
    kind: Literal["markov", "text"] = "markov"
    batch_size: int = setting(16, low=1, high=1 << 20)
    branching: int = setting(4, low=1, high=1 << 22)
    path: str = ""
    seed: int = setting(1234, low=0, high=MAX_SEED)


@dataclass(frozen=True)
class Optim:
    algorithm: Literal["ddp", "diloco"] = "ddp"
    lr: float = setting(3e-3, above=0, high=MAX_LR)
    weight_decay: float = setting(0.1, low=0, high=1)
    betas: tuple[float, float] = setting((0.9, 0.95), low=0, below=1)  # each of the two
    grad_clip: float = setting(1.0, low=0, high=1e6)
    sync_every: int = setting(500, low=1, high=MAX_STEPS)
    outer_lr: float = setting(0.7, above=0, high=MAX_LR)
    outer_momentum: float = setting(0.9, low=0, below=1)
    nesterov: bool = True
    fragments: int = setting(1, low=1, high=1024)
    fragment_sync_delay: int = setting(0, low=0, high=MAX_STEPS)


@dataclass(frozen=True)
class Perf:
    # Dense bf16 peak per GPU in TFLOPS, MFU's denominator. 0: from $MERIDIAN_PEAK_BF16_TFLOPS (gkr sets
    # it from the fleet registry); still 0 (CPU, unknown machine): MFU is reported as n/a.
    peak_tflops: float = setting(0.0, low=0, high=100_000)


@dataclass(frozen=True)
class Logging:
    """Weights & Biases: each logging window's run metrics, per group (trainer/observe/wandb_sink.py); off by default."""

    wandb: bool = False
    wandb_project: str = "meridian"
    wandb_entity: str = ""  # "": the API key's default entity


@dataclass(frozen=True)
class Config:
    run: Run
    ft: FaultTolerance
    checkpoint: Checkpoint
    model: Model
    data: Data
    optim: Optim
    perf: Perf
    extra: dict[str, Any]  # keys added with `+` that the schema does not know: kept for the user's code
    logging: Logging = field(default_factory=Logging)
    rl: RL = field(default_factory=RL)  # read with run.mode=rl only


def _fix(path: str, kind: str) -> str:
    return f"set {path} to one of them" if kind.startswith("one of") else f"set {path}=<{kind}>"


def from_dict(data: dict[str, Any]) -> Config:
    """The typed configuration from a composed (and resolved) mapping; ConfigError lists every problem."""
    sections = {f.name for f in fields(Config) if f.name != "extra"}
    known = {name: data.get(name, {}) for name in sections}
    extra = {k: v for k, v in data.items() if k not in sections}
    config, problems = codec.decode(Config, {**known, "extra": extra}, fix=_fix)
    if problems:
        raise ConfigError(*(p.line() for p in problems))
    assert config is not None
    return _cross_checks(config)


def _cross_checks(config: Config) -> Config:
    # The run's checkpoints live at MERIDIAN_CHECKPOINT_DIR/<run.name>, inside the team's own
    # folder of the bucket (gkr mounts nothing else): a name that is not one path segment could leave it.
    name = config.run.name
    if not name or "/" in name or name in (".", "..") or any(ord(c) < 32 for c in name):
        raise ConfigError(f"run.name: {name!r} must be one path segment (no '/', not '.' or '..'); set run.name=<name>")
    if config.ft.min_replicas > config.ft.replica_groups:
        raise ConfigError(
            f"ft.min_replicas: {config.ft.min_replicas} > ft.replica_groups {config.ft.replica_groups}; lower it"
        )
    if (spare := spares.problem(config.ft.spare_groups, config.ft.replica_groups)) is not None:
        raise ConfigError(f"ft.spare_groups: {spare}")  # the bounds gkr refuses at submit
    if not config.ft.enabled and config.ft.replica_groups != 1:
        raise ConfigError(
            f"ft.replica_groups: {config.ft.replica_groups} groups need fault tolerance to agree on each step; "
            "set ft.replica_groups=1 or ft.enabled=true"
        )
    if not config.ft.enabled and config.optim.algorithm == "diloco":
        raise ConfigError(
            "optim.algorithm: diloco syncs replica groups through torchft; set ft.enabled=true or optim=ddp"
        )
    if config.data.batch_size % config.ft.group_size:
        raise ConfigError(
            f"data.batch_size: {config.data.batch_size} is not a multiple of ft.group_size {config.ft.group_size} "
            "(each rank of a group takes an equal part of the group's batch)"
        )
    _model_checks(config)
    _link_checks(config)
    _rl_checks(config)
    _region_checks(config)
    if config.optim.fragment_sync_delay >= config.optim.sync_every // config.optim.fragments:
        raise ConfigError("optim.fragment_sync_delay: must be smaller than optim.sync_every / optim.fragments")
    if config.optim.sync_every % config.optim.fragments:
        raise ConfigError(
            f"optim.sync_every: {config.optim.sync_every} is not a multiple of optim.fragments {config.optim.fragments}"
        )
    if config.optim.algorithm == "diloco" and config.optim.fragments > config.model.layers:
        raise ConfigError(f"optim.fragments: {config.optim.fragments} > model.layers {config.model.layers}")
    return config


def _rl_checks(config: Config) -> None:
    if config.run.mode != "rl":
        return
    try:
        check_rl(config.rl)
    except Invalid as error:
        raise ConfigError(*error.lines) from None
    if config.optim.algorithm != "ddp":
        raise ConfigError("optim.algorithm: run.mode=rl commits every step (a new policy version); set optim=ddp")
    ranks = config.ft.replica_groups * config.ft.group_size
    if config.rl.prompts_per_step < ranks:
        raise ConfigError(
            f"rl.prompts_per_step: {config.rl.prompts_per_step} < {ranks} ranks (each trains on its share of the "
            "step's prompts); raise it"
        )


def _link_checks(config: Config) -> None:
    if (config.ft.link_rtt_ms or config.ft.link_gbps) and not config.ft.enabled:
        raise ConfigError("ft.link_rtt_ms: the link emulator delays the cross-group all-reduce; set ft.enabled=true")


def _model_checks(config: Config) -> None:
    m = config.model
    if m.d_model % m.heads:
        raise ConfigError(f"model.heads: {m.heads} does not divide model.d_model {m.d_model}")
    if m.kv_heads and m.heads % m.kv_heads:
        raise ConfigError(f"model.kv_heads: {m.kv_heads} does not divide model.heads {m.heads}")
    if (m.d_model // m.heads) % 2:
        raise ConfigError(
            f"model.heads: head dimension d_model/heads = {m.d_model // m.heads} is odd; rotary embeddings need it even"
        )
    if config.data.kind == "text" and m.vocab < 256:
        raise ConfigError(f"model.vocab: {m.vocab} < 256, but data=text has byte tokens (0-255); set model.vocab>=256")


_LIGHTHOUSE = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]{1,255}")  # torchft's form: http://host:port


def _region_checks(config: Config) -> None:
    ft, checkpoint = config.ft, config.checkpoint
    if ft.region and not is_dns1035_label(ft.region):  # a GCP region name (us-east4) or a test's ("a")
        raise ConfigError(f"ft.region: {ft.region[:80]!r} is not a region name (lowercase letters, digits, '-')")
    if ft.lighthouse and not _LIGHTHOUSE.fullmatch(ft.lighthouse):
        raise ConfigError(
            f"ft.lighthouse: {ft.lighthouse[:80]!r} is not an address; set ft.lighthouse=http://host:port"
        )
    if ft.lighthouse_tls and not ft.lighthouse:
        raise ConfigError(
            "ft.lighthouse_tls: set, but ft.lighthouse is empty (the local launcher's own Lighthouse is plain); "
            "set ft.lighthouse=http://host:port or drop ft.lighthouse_tls"
        )
    if ft.cross_group_backend == "nccl" and ft.device == "cpu":
        raise ConfigError("ft.cross_group_backend: nccl needs ft.device=cuda; set it to auto or gloo")
    for i, entry in enumerate(checkpoint.resume_from):
        if not entry.strip() or "," in entry or len(entry) > 1000 or any(ord(c) < 32 for c in entry):
            raise ConfigError(
                f"checkpoint.resume_from[{i}]: {entry[:80]!r} is not a checkpoint directory "
                "(one path or URL, no commas or control characters)"
            )


def environment_defaults(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """A run across regions from gkr's environment, where the configuration leaves the setting empty."""
    from contract.names import LIGHTHOUSE_ENV, REGION_ENV, RESUME_FROM_ENV, RUN_TLS_ENV

    ft, checkpoint = dict(data.get("ft") or {}), dict(data.get("checkpoint") or {})
    defaults = ((ft, "lighthouse", LIGHTHOUSE_ENV), (ft, "region", REGION_ENV), (ft, "lighthouse_tls", RUN_TLS_ENV))
    for section, key, env in defaults:
        if not section.get(key) and environ.get(env, "").strip():
            section[key] = environ[env].strip()
    if not checkpoint.get("resume_from") and environ.get(RESUME_FROM_ENV, "").strip():
        checkpoint["resume_from"] = [d.strip() for d in environ[RESUME_FROM_ENV].split(",") if d.strip()]
    return data | {"ft": ft, "checkpoint": checkpoint}


def peak_from_env(config: Config, environ: Mapping[str, str]) -> Config:
    """perf.peak_tflops from gkr's environment when the config leaves it at 0."""
    raw = environ.get(PEAK_TFLOPS_ENV, "").strip()
    if config.perf.peak_tflops or not raw:
        return config
    try:
        peak = float(raw)
    except ValueError:
        peak = -1.0
    if not (math.isfinite(peak) and peak >= 0):
        raise ConfigError(
            f"{PEAK_TFLOPS_ENV}: {raw[:40]!r} is not a number of TFLOPS; unset it or set perf.peak_tflops=<per GPU>"
        )
    return replace(config, perf=Perf(peak_tflops=peak))


def compose(config_file: str | Path, overrides: list[str]) -> Config:
    """Compose `config_file` (its folder holds the config groups) with command-line overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    _refuse_moved(overrides)
    overrides = [*_shape_from_environment(overrides), *overrides]
    path = Path(config_file).resolve()
    if not path.is_file():
        raise ConfigError(
            f"{config_file}: no such config file; pass the path to a YAML file such as configs/config.yaml"
        )
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base=None):
            composed = hydra_compose(config_name=path.stem, overrides=overrides)
        data = OmegaConf.to_container(composed, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as error:
        raise ConfigError(f"{error.full_key}: missing; set {error.full_key}=<value>") from None
    except (HydraException, OmegaConfBaseException) as error:
        text = str(error).split("Config search path")[0]  # Hydra appends its search path: noise here
        lines = [line.strip().rstrip(":.") for line in text.splitlines() if line.strip()]
        raise ConfigError(f"{path.name}: {'; '.join(lines) or type(error).__name__}") from None
    assert isinstance(data, dict)
    data = environment_defaults({str(k): v for k, v in data.items()}, os.environ)
    return peak_from_env(from_dict(data), os.environ)


def _refuse_moved(overrides: list[str]) -> None:
    """An override of a key the RL run takes from elsewhere (rl.lr: optim.lr) is one line naming that key."""
    from trainer.rl.settings import MOVED

    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in MOVED:
            value = override.split("=", 1)[1] if "=" in override else "<value>"
            new = MOVED[key].split()[-1]
            fix = f"set {new}={value}" if "." in new else "drop it"
            raise ConfigError(f"{key}: not a key; {MOVED[key]}: {fix}")


def _shape_from_environment(overrides: list[str]) -> list[str]:
    """The job's shape gkr sets in its environment (the replica groups, an RL job's generator engines),
    unless the command line sets it itself."""
    import os

    from contract.names import GENERATORS_ENV, GROUP_SIZE_ENV, REPLICA_GROUPS_ENV

    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    found = []
    shape = (
        (REPLICA_GROUPS_ENV, "ft.replica_groups"),
        (GROUP_SIZE_ENV, "ft.group_size"),
        (GENERATORS_ENV, "rl.generators"),
    )
    for env, key in shape:
        value = os.environ.get(env)
        if value is not None and key not in given:
            if not value.isdigit():
                raise ConfigError(f"${env}: expected a whole number, got {value[:40]!r}; fix the job's environment")
            found.append(f"{key}={int(value)}")
    return found


def to_dict(config: Config) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
        return list(value) if isinstance(value, tuple) else value

    result = plain(config)
    assert isinstance(result, dict)
    return result
