# Figures (papermill-executed notebooks), tables and the machine-readable summary.

# One rule per entry of the figure registry (src/transformer_hessian/registry.py): each runs
# its notebook with papermill; inputs, caption and outputs come from the registry entry.
# To add a figure, add a registry entry and its notebook (see the registry's docstring).
for _spec in registry_rule_specs(config):

    rule:
        name:
            _spec["name"]
        input:
            notebook=f"{NB}/{_spec['notebook']}",
            # files the figure waits for but does not read (e.g. the Hessian check of the theory rule)
            gate=_spec["gate"],
            **_spec["inputs"],
        output:
            pdf=[report(p, caption="../report/figure.rst", category="Figures") for p in _spec["pdf"]],
            png=_spec["png"],
            tables=[f"paper/tables/{t}.{ext}" for t in _spec["tables"] for ext in ("csv", "tex", "md")],
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
        threads: 1
        resources:
            mem_mb=2000,
            runtime=20,
        shell:
            "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
            "{params.inputs_args} {params.literal_args} {params.outs_args} > {log:q} 2>&1"


rule tables:
    input:
        init=f"{HDIR}/init_norms.json",
        trained=f"{HDIR}/trained_norms.json",
        metrics=expand("results/{exp}/metrics.json", exp=sorted({HEXP, LEXP})),
        theory=expand("results/{exp}/theory/{stage}.json", exp=HEXP, stage=STAGES),
    output:
        [
            report(
                f"paper/tables/{t}.{ext}",
                caption=f"../report/table_{t}.rst",
                category="Tables",
            )
            if ext == "md"
            else f"paper/tables/{t}.{ext}"
            for t in TABLES
            for ext in ("csv", "tex", "md")
        ],
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
        "transformer-hessian tables --norms-init {input.init:q} --norms-trained {input.trained:q} "
        "--metrics {input.metrics:q} --theory {input.theory:q} --out-dir paper/tables 2> {log:q}"


rule summary:
    input:
        norms=expand(f"{HDIR}/{{stage}}_norms.json", stage=STAGES),
        metrics=expand("results/{exp}/metrics.json", exp=sorted({HEXP, LEXP})),
        landscape=f"results/{LEXP}/landscape/landscape.json",
        theory=expand("results/{exp}/theory/{stage}.json", exp=HEXP, stage=STAGES),
        figures=expand("paper/figures/{fig}.pdf", fig=FIGURES),
        tables=expand("paper/tables/{table}.csv", table=ALL_TABLES),
        claims="paper/claims.json",
        bounds=expand("results/{exp}/bounds/{stage}.json", exp=HEXP, stage=STAGES),
        scaling=["results/scaling/scaling.json"] if config["scaling"]["enabled"] else [],
        spectrum=f"results/spectrum/{SEXP}.json",
    output:
        "paper/summary.json",
    params:
        config_hash=CONFIG_HASH,
        registry_config=lambda wildcards: json.dumps(config),  # a function: braces in values are no wildcards
        notebook_dir=NB,
        scaling_args=lambda w, input: " ".join(f"--scaling {shlex.quote(p)}" for p in input.scaling),
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
        "transformer-hessian summary --config-hash {params.config_hash:q} --norms {input.norms:q} "
        "--metrics {input.metrics:q} --landscape {input.landscape:q} --theory {input.theory:q} "
        "--figures {input.figures:q} --tables {input.tables:q} --registry-config {params.registry_config:q} "
        "--notebook-dir {params.notebook_dir:q} --claims {input.claims:q} --bounds {input.bounds:q} {params.scaling_args} "
        "--spectrum {input.spectrum:q} --out {output:q} 2> {log:q}"
