# Shared constants and helpers of the rules (no rules here).

NB = f"{workflow.basedir}/notebooks"
HDIR = f"results/{HEXP}/hessian"


def experiment(exp):
    """The config section of experiment ``exp``."""
    return config["experiments"][exp]


def figure(name, caption):
    """A figure output (pdf) that appears in `snakemake --report` with its caption."""
    return report(f"paper/figures/{name}.pdf", caption=f"../report/{caption}", category="Figures")


def data_root_of(wildcards, input):
    """The data root, derived from the manifest input (ROOT/DATASET/manifest.json)."""
    return os.path.dirname(os.path.dirname(input.manifest))


import shlex  # noqa: E402

from transformer_hessian.registry import rule_specs as registry_rule_specs  # noqa: E402
