# Shared constants and helpers of the rules (no rules here). A rule's input is the output of the
# rule that makes it, `rules.<producer>.output.<name>` (expanded where the wildcards differ), and a
# producer's output paths come from the package (`produced` below), so that every result path is
# typed once, in its producer's OUTPUTS. The helpers below are called while the rules are defined
# or while jobs are built, after their producer rule exists.

NB = f"{workflow.basedir}/notebooks"
TABLE_EXTS = ["csv", "tex", "md"]
# The training checkpoint (an output name of rule `train`) that each Hessian stage evaluates.
STAGE_CHECKPOINT = {"init": "init", "trained": "final"}

# produced(rule, **wildcards): the outputs of `rule` as output key -> path, for its `output:`
# (`**produced("dynamics", exp=HEXP)`), from the OUTPUTS of the producer's `result` module
# (`train_result.py` for rule train), the lookup the figure registry resolves too; the wildcards
# given are filled in, the others stay `{name}`; an unknown rule or wildcard is a KeyError naming
# the known ones.
from transformer_hessian.registry import produced  # noqa: E402


def experiment(exp):
    """The config section of experiment ``exp``."""
    return config["experiments"][exp]


def data_root_of(wildcards, input):
    """The data root, derived from the manifest input (ROOT/DATASET/manifest.json)."""
    return os.path.dirname(os.path.dirname(input.manifest))


def manifest(dataset):
    """The manifest of ``dataset`` that rule ``download`` writes."""
    return expand(rules.download.output.manifest, dataset=dataset)[0]


def manifest_of(wildcards):
    """Input function: the manifest of the data set of experiment ``{exp}``."""
    return manifest(experiment(wildcards.exp)["dataset"])


def checkpoint_of(wildcards):
    """Input function: the checkpoint of experiment ``{exp}`` at ``{stage}`` (rule ``train``)."""
    return expand(getattr(rules.train.output, STAGE_CHECKPOINT[wildcards.stage]), exp=wildcards.exp)[0]


def table_files(stems, exts=TABLE_EXTS):
    """The files paper/tables/<stem>.<ext> of each table stem (the one place this path is typed)."""
    return expand("paper/tables/{stem}.{ext}", stem=stems, ext=exts)


def out_dir_of(wildcards, output):
    """The folder of a rule's first output (a command's --out-dir)."""
    return os.path.dirname(output[0])


# Resources of the jobs that load a model: the config's resources; cpus_per_task (SLURM)
# follows the rule's threads.
MODEL_RESOURCES = dict(
    cpus_per_task=lambda wildcards, threads: threads,
    gpu=config["resources"]["gpu"],
    mem_mb=config["resources"]["mem_mb"],
    runtime=config["resources"]["runtime"],
)

# The torch threads of train and of dynamics, which replays its first steps and equals its
# checkpoints bit for bit only with the same count (the trained weights depend on it: with 1 thread
# fig6_slope flips on the embedded default). It is the thread count snakemake gives a job that asks
# for 4 (`threads: 4`, capped by --max-threads and --cores: 2 on a 2-core machine), the count these
# two rules had before they reserved fewer cores. On the local executor they reserve one core
# (REPLAY_CORES): on the default's small models they keep one core busy (CPU time = wall time in
# benchmarks/), and the other core runs other jobs meanwhile (docs/timings.md, "A leaner pipeline"). On a
# cluster (and in a job there) they reserve REPLAY_THREADS, as cpus_per_task.
REPLAY_THREADS = min(
    n for n in (4, workflow.resource_settings.max_threads, workflow.resource_settings.cores) if n is not None
)
REPLAY_CORES = 1 if workflow.local_exec and workflow.is_main_process else REPLAY_THREADS
# torch_threads is a resource, not a param: params are a rerun trigger, and a run with another
# --max-threads would retrain (as `{threads}` did before, the count is not a trigger).
REPLAY_RESOURCES = dict(MODEL_RESOURCES, cpus_per_task=REPLAY_THREADS, torch_threads=REPLAY_THREADS)


import hashlib  # noqa: E402

from transformer_hessian.util.files import write_text  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402

SETTINGS_DIR = "results/settings"
# Settings files named while the workflow is parsed and its jobs planned: path -> text. Nothing is
# written then (a dry run writes nothing): the onstart hook (hooks.smk) writes them when the run
# starts, and a file named after that (a job's params evaluated late) is written at once.
_SETTINGS = {}
_RUN_STARTED = []


def _write_settings(path, text):
    """Write one settings file (atomically, util.files.write_text), unless it exists: its name holds its hash."""
    if not os.path.exists(path):
        write_text(text, path)


def settings_file(name, section):
    """The settings file of a config section, results/settings/<name>-<sha256[:12]>.json, as
    "@<path>", the form in which the commands take a settings file (transformer_hessian.pipeline.cli),
    so that no command line carries a whole config section. The name holds the content's hash: a
    changed section is a new file name, so snakemake's params trigger reruns the jobs that use it,
    and an unchanged one keeps its name, so nothing reruns. Written when the run starts
    (:func:`write_settings_files`), never while the workflow is parsed."""
    text = json.dumps(section, indent=1) + "\n"
    path = f"{SETTINGS_DIR}/{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    _SETTINGS[path] = text
    if _RUN_STARTED:
        _write_settings(path, text)
    return f"@{path}"


def write_settings_files():
    """Write every settings file named so far (the onstart hook), and from now on each new one at once."""
    _RUN_STARTED.append(True)
    for path, text in _SETTINGS.items():
        _write_settings(path, text)


def spec_file(wildcards):
    """Params function: the settings file of experiment ``{exp}``'s config section."""
    return settings_file(f"spec_{wildcards.exp}", experiment(wildcards.exp))

from transformer_hessian.registry import rule_specs as registry_rule_specs  # noqa: E402


def report_table_caption(stem):
    """The report caption of table ``stem``: its own page where one exists, else the generic one."""
    caption = f"{workflow.basedir}/workflow/report/table_{stem}.rst"
    return f"../report/table_{stem}.rst" if os.path.exists(caption) else "../report/table_page.rst"


# Inputs and parameters of every rule that evaluates the model of {exp} at {stage} (hessian,
# theory, bounds): its checkpoint from rule train and its data set's manifest.
STAGE_INPUTS = dict(checkpoint=checkpoint_of, manifest=manifest_of)
STAGE_PARAMS = dict(
    data_root=data_root_of,
    spec=spec_file,
    hessian=settings_file("hessian", config["hessian"]),
    device=config["device"],
)
