# Architecture study (beyond the paper; transformer_hessian.studies.architectures): torch encoder
# layers of several architectures trained on the Hessian experiment's data, their exact Hessians at
# init and after training; then the table, the claim rows and the summary section. Included by the
# Snakefile with every study's rule file; its rules exist when architectures.enabled is true. It
# adds its table to ALL_TABLES, its claim rows to CLAIM_ROW_FILES and its summary section to
# SUMMARY_SECTIONS (consumed by claims.smk and figures.smk).


if config["architectures"]["enabled"]:

    rule architectures:
        input:
            manifest=manifest(experiment(HEXP)["dataset"]),
        output:
            **produced("architectures", exp=HEXP),  # json
        params:
            experiment=HEXP,
            spec=settings_file(f"spec_{HEXP}", experiment(HEXP)),
            architectures=settings_file("architectures", config["architectures"]),
            data_root=lambda w, input: os.path.dirname(os.path.dirname(input.manifest)),
        conda:
            "../../../environment.yml"
        log:
            "logs/architectures/run.log",
        benchmark:
            "benchmarks/architectures/run.tsv"
        # scheduling (train.smk): before the short figure jobs, so that its figure does not end the run
        priority: 5
        threads: 1
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} architectures run --experiment {params.experiment:q} --spec {params.spec:q} "
            "--architectures {params.architectures:q} --data-root {params.data_root:q} --out {output.json:q} 2> {log:q}"


    rule architectures_report:
        input:
            rules.architectures.output.json,
        output:
            tables=table_files("architectures"),
            **produced("architectures_report", exp=HEXP),  # claims, summary
        params:
            out_dir=lambda w, output: os.path.dirname(output.tables[0]),
        conda:
            "../../../environment.yml"
        log:
            "logs/architectures/report.log",
        benchmark:
            "benchmarks/architectures/report.tsv"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        shell:
            "transformer-hessian architectures report --result {input:q} --out-dir {params.out_dir:q} "
            "--claims-out {output.claims:q} --summary-out {output.summary:q} 2> {log:q}"


    ALL_TABLES.append("architectures")
    CLAIM_ROW_FILES.append((50, rules.architectures_report.output.claims))
    SUMMARY_SECTIONS.append(("architectures", rules.architectures_report.output.summary))
