# Figures (executed notebooks), tables and the machine-readable summary.

# One rule per entry of the figure registry (src/transformer_hessian/registry/figures.py): each runs
# its notebook with `transformer-hessian notebook` (in one process, no Jupyter kernel: about 1 s less
# per figure job than papermill; transformer_hessian.pipeline.notebooks), passing the notebook
# parameters as papermill's -p would (each notebook still runs with papermill as well); inputs,
# caption and outputs come from the registry entry.
# To add a figure, add a registry entry and its notebook (see the registry's docstring).
FIGURE_SPECS = registry_rule_specs(config)
for _spec in FIGURE_SPECS:

    rule:
        name:
            _spec["name"]
        input:
            notebook=f"{NB}/{_spec['notebook']}",
            # files the figure waits for but does not read (e.g. the Hessian check of the theory rule)
            gate=_spec["gate"],
            **_spec["inputs"],
        output:
            # the report shows the PNGs (browsers show no PDF in a frame reliably) and offers the PDFs
            pdf=[report(p, caption="../report/figure.rst", category="Figures (PDF)") for p in _spec["pdf"]],
            png=[report(p, caption="../report/figure.rst", category="2 Figures") for p in _spec["png"]],
            tables=table_files(_spec["tables"]),
            executed=_spec["executed"],
        params:
            caption=_spec["caption"],
            # every input but the notebook becomes a notebook parameter of the same name
            inputs_args=lambda w, input: " ".join(
                f"-p {name} {shlex.quote(path)}" for name, path in input.items() if name not in ("notebook", "gate")
            ),
            literal_args=_spec["literal"],
            # out (one figure) or out_<id> per figure, and table_<stem> per table
            outs_args=" ".join(f"-p {name} {shlex.quote(path)}" for name, path in _spec["outs"].items()),
        conda:
            "../../environment.yml"
        log:
            f"logs/figures/{_spec['name']}.log",
        benchmark:
            f"benchmarks/figures/{_spec['name']}.tsv"
        # scheduling (train.smk): a notebook that draws several figures is one of the longest jobs
        priority: 5 if len(_spec["figures"]) > 1 else 0
        threads: 1
        resources:
            mem_mb=2000,
            runtime=20,
        shell:
            "transformer-hessian notebook {input.notebook:q} {output.executed:q} "
            "{params.inputs_args} {params.literal_args} {params.outs_args} > {log:q} 2>&1"


# Figure id -> {"pdf": path, "png": path}, from the outputs of the figure rules above.
FIGURE_FILES = {
    fig: {ext: str(getattr(getattr(rules, _spec["name"]).output, ext)[i]) for ext in ("pdf", "png")}
    for _spec in FIGURE_SPECS
    for i, fig in enumerate(_spec["figures"])
}


rule tables:
    input:
        metrics=expand(rules.train.output.metrics, exp=sorted({HEXP, LEXP})),
    output:
        table_files(TABLES),  # in the report as HTML pages (rule report_pages)
    params:
        out_dir=out_dir_of,
    conda:
        "../../environment.yml"
    log:
        "logs/tables.log",
    benchmark:
        "benchmarks/tables.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian tables --metrics {input.metrics:q} --out-dir {params.out_dir:q} 2> {log:q}"


rule summary:
    input:
        metrics=expand(rules.train.output.metrics, exp=sorted({HEXP, LEXP})),
        figures=[FIGURE_FILES[fig]["pdf"] for fig in FIGURES],
        tables=table_files(ALL_TABLES, ["csv"]),
        claims=rules.claims.output.json,
        sections=[path for _, path in SUMMARY_SECTIONS],  # each study's section (its rule file adds it)
    output:
        "paper/summary.json",
    params:
        config_hash=CONFIG_HASH,
        registry_config=settings_file("config", config),
        notebook_dir=NB,
        # the studies' sections as one settings file {NAME: PATH} (--sections), so that the command
        # line does not grow with every study
        sections=settings_file("summary_sections", dict(SUMMARY_SECTIONS)),
    conda:
        "../../environment.yml"
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian summary --config-hash {params.config_hash:q} --metrics {input.metrics:q} "
        "--figures {input.figures:q} --tables {input.tables:q} --registry-config {params.registry_config:q} "
        "--notebook-dir {params.notebook_dir:q} --claims {input.claims:q} "
        "--sections {params.sections:q} --out {output:q} 2> {log:q}"
