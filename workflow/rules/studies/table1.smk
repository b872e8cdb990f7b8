# Table 1 of the paper: the hyperparameters of both experiments next to the paper's.
# Computation: transformer_hessian.studies.table1; its table goes to ALL_TABLES (the all, summary
# and report_pages rules).

rule table1:
    input:
        metrics=expand(rules.train.output.metrics, exp=sorted({HEXP, LEXP})),
    output:
        table_files("table1"),  # in the report as an HTML page (rule report_pages)
    params:
        out_dir=out_dir_of,
        config=settings_file("table1", {k: config[k] for k in ("experiments", "hessian", "landscape")}),
    conda:
        "../../../environment.yml"
    log:
        "logs/table1.log",
    benchmark:
        "benchmarks/table1.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian table1 --config {params.config:q} --metrics {input.metrics:q} "
        "--out-dir {params.out_dir:q} 2> {log:q}"


ALL_TABLES.append("table1")
