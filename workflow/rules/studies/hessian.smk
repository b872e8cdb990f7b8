# The Hessian study (Figures 3-5): the exact dense Hessian of the loss on one fixed training batch
# w.r.t. [W_Q, W_K, W_V, W_1, W_2] for the model of experiment {exp} at {stage} (init or trained),
# and its check against curvlinops Hessian-vector products (rule theory), which gates the Hessian
# figures. Computation: transformer_hessian.studies.hessian (steps) on transformer_hessian.core.hessian
# and transformer_hessian.core.checks; the figure rules come from the registry (studies/hessian/registry.py).
# The Snakefile includes this file before the other rule files of the studies: bounds and dynamics
# read its outputs (rules.hessian, rules.theory). Its tables, claim rows and summary sections come from
# rule hessian_report (ALL_TABLES, CLAIM_ROW_FILES, SUMMARY_SECTIONS).


rule hessian:
    input:
        **STAGE_INPUTS,
    output:
        **produced("hessian"),  # npz, norms
    params:
        **STAGE_PARAMS,
    conda:
        "../../../environment.yml"
    log:
        "logs/hessian/{exp}_{stage}.log",
    benchmark:
        "benchmarks/hessian/{exp}_{stage}.tsv"
    # dynamics, theory and bounds wait for it, and the Hessian figures for those
    priority: 20
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} hessian --checkpoint {input.checkpoint:q} --stage {wildcards.stage:q} "
        "--spec {params.spec:q} --hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
        "--out-npz {output.npz:q} --out-norms {output.norms:q} 2> {log:q}"


# Checks the Hessian the hessian rule saved against curvlinops Hessian-vector products on random
# probe vectors (theory.probes per group) on the same batch; fails when any relative error exceeds
# theory.tolerance, which stops the Hessian figures that depend on it.


rule theory:
    input:
        **STAGE_INPUTS,
        npz=rules.hessian.output.npz,
        norms=rules.hessian.output.norms,
    output:
        **produced("theory"),  # json
    params:
        **STAGE_PARAMS,
        tolerance=config["theory"]["tolerance"],
        probes=config["theory"]["probes"],
    conda:
        "../../../environment.yml"
    log:
        "logs/theory/{exp}_{stage}.log",
    benchmark:
        "benchmarks/theory/{exp}_{stage}.tsv"
    # the Hessian figures wait for it (fig3_fig4 and fig7_fig11 among the longest figure jobs)
    priority: 10
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} theory --checkpoint {input.checkpoint:q} --stage {wildcards.stage:q} "
        "--spec {params.spec:q} --hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
        "--tolerance {params.tolerance:q} --hessian-npz {input.npz:q} --norms {input.norms:q} --probes {params.probes:q} "
        "--out {output:q} 2> {log:q}"


# The study's tables (block norms, the check per block pair), the claim rows of Figures 3-5 and its
# two sections of paper/summary.json, from both stages' results.


rule hessian_report:
    input:
        hessian_init=expand(rules.hessian.output.npz, exp=HEXP, stage="init"),
        norms=expand(rules.hessian.output.norms, exp=HEXP, stage=STAGES),
        theory=expand(rules.theory.output.json, exp=HEXP, stage=STAGES),
        metrics=expand(rules.train.output.metrics, exp=HEXP),
    output:
        tables=table_files(["block_norms", "closed_form_check"]),
        **produced("hessian_report", exp=HEXP),  # claims, hessian_section, theory_section
    params:
        tables_dir=lambda w, output: os.path.dirname(output.tables[0]),
    conda:
        "../../../environment.yml"
    log:
        "logs/hessian/report.log",
    benchmark:
        "benchmarks/hessian/report.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian hessian-report --hessian-init {input.hessian_init:q} --norms {input.norms:q} "
        "--theory {input.theory:q} --metrics {input.metrics:q} --tables-dir {params.tables_dir:q} "
        "--claims-out {output.claims:q} --hessian-section-out {output.hessian_section:q} "
        "--theory-section-out {output.theory_section:q} 2> {log:q}"


ALL_TABLES.extend(["block_norms", "closed_form_check"])
CLAIM_ROW_FILES.append((10, rules.hessian_report.output.claims))
SUMMARY_SECTIONS.append(("hessian", rules.hessian_report.output.hessian_section))
SUMMARY_SECTIONS.append(("theory", rules.hessian_report.output.theory_section))
