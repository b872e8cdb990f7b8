# Pages of the review report (`snakemake --report paper/report.html`): the claims verdicts (full
# table; a compact one on the report's first page, workflow/report/workflow.rst), every table of
# paper/tables/ as HTML, the config and the provenance. Computation: transformer_hessian.pipeline.report_pages.


rule report_pages:
    input:
        claims=rules.claims.output.json,
        summary=rules.summary.output,
        tables=table_files(ALL_TABLES, ["csv"]),
    output:
        claims=report("results/report/claims.html", caption="../report/claims.rst", category="1 Claims"),
        first_page="results/report/claims_summary.html",
        tables=[
            report(f"results/report/tables/{t}.html", caption=report_table_caption(t), category="3 Tables", labels={"table": t})
            for t in ALL_TABLES
        ],
        config=report("results/report/config.html", caption="../report/config.rst", category="4 Config and provenance"),
        provenance=report(
            "results/report/provenance.html", caption="../report/provenance.rst", category="4 Config and provenance"
        ),
    params:
        config=settings_file("config", config),
        out_dir=lambda w, output: os.path.dirname(output.claims),
    conda:
        "../../environment.yml"
    log:
        "logs/report_pages.log",
    benchmark:
        "benchmarks/report_pages.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian report-pages --claims {input.claims:q} --summary {input.summary:q} "
        "--tables {input.tables:q} --config {params.config:q} --out-dir {params.out_dir:q} 2> {log:q}"
