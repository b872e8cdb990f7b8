# Bound evaluation: measured Hessian norms vs the project's proven bounds and the paper's
# Theorems 1 and 6 (with Lemma 4), per stage; then the table and the figure. Computation:
# transformer_hessian.studies.bounds; the figure's rule (bounds) comes from the figure registry (its
# studies/bounds/registry.py). The table goes to ALL_TABLES, the claim rows to CLAIM_ROW_FILES and the
# summary section (each stage's summary and the claim rows) to SUMMARY_SECTIONS.


rule bounds:
    input:
        **STAGE_INPUTS,
        norms=rules.hessian.output.norms,
        npz=rules.hessian.output.npz,
    output:
        **produced("bounds"),  # json
    params:
        **STAGE_PARAMS,
        bounds=settings_file("bounds", config["bounds"]),
    conda:
        "../../../environment.yml"
    log:
        "logs/bounds/{exp}_{stage}.log",
    benchmark:
        "benchmarks/bounds/{exp}_{stage}.tsv"
    # scheduling (train.smk): before the short figure jobs, so that its table and figure do not end the run
    priority: 5
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} bounds evaluate --checkpoint {input.checkpoint:q} "
        "--stage {wildcards.stage:q} --spec {params.spec:q} --hessian {params.hessian:q} --bounds {params.bounds:q} "
        "--data-root {params.data_root:q} --norms {input.norms:q} --hessian-npz {input.npz:q} "
        "--device {params.device:q} --out {output:q} 2> {log:q}"


rule bounds_table:
    input:
        expand(rules.bounds.output.json, exp=HEXP, stage=STAGES),
    output:
        tables=table_files("bounds"),
        **produced("bounds_table", exp=HEXP),  # claims
    params:
        out_dir=lambda w, output: os.path.dirname(output.tables[0]),
    conda:
        "../../../environment.yml"
    log:
        "logs/bounds/table.log",
    benchmark:
        "benchmarks/bounds/table.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian bounds table --results {input:q} --out-dir {params.out_dir:q} "
        "--claims-out {output.claims:q} --summary-out {output.summary:q} 2> {log:q}"


ALL_TABLES.append("bounds")
CLAIM_ROW_FILES.append((40, rules.bounds_table.output.claims))
SUMMARY_SECTIONS.append(("bounds", rules.bounds_table.output.summary))
