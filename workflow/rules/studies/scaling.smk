# Scaling study (transformer_hessian.studies.scaling), its rules only when scaling.enabled is true: the
# sweep's models are split into scaling.jobs parts (1 on the embedded default: one process pays
# torch's start-up once; on a cluster, one part per model runs them side by side). Each model's
# result is cached in results/scaling/models/<id>.json (not a declared output, so a changed
# setting reruns a part that skips every model whose own settings did not change). The figure
# (registry entry "scaling") reads results/scaling/scaling.json.
# Its summary section goes to SUMMARY_SECTIONS (the summary rule, figures.smk).


if config["scaling"]["enabled"]:

    SCALING = config["scaling"]


    rule scaling_models:
        input:
            manifest=manifest(SCALING["dataset"]),
        output:
            **produced("scaling_models"),  # json (wildcards part, jobs)
        wildcard_constraints:
            part="[0-9]+",
            jobs="[0-9]+",
        params:
            data_root=data_root_of,
            scaling=settings_file("scaling", SCALING),
            device=config["device"],
        conda:
            "../../../environment.yml"
        log:
            "logs/scaling/part{part}of{jobs}.log",
        benchmark:
            "benchmarks/scaling/part{part}of{jobs}.tsv"
        # scheduling (train.smk): before the short figure jobs, so that its figure does not end the run
        priority: 5
        threads: 1
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} scaling models --scaling {params.scaling:q} "
            "--part {wildcards.part:q} --jobs {wildcards.jobs:q} --data-root {params.data_root:q} "
            "--cache-dir results/scaling/models --device {params.device:q} --out {output:q} 2> {log:q}"


    rule scaling:
        input:
            expand(rules.scaling_models.output.json, part=range(SCALING["jobs"]), jobs=SCALING["jobs"]),
        output:
            **produced("scaling"),  # json, summary
        params:
            scaling=settings_file("scaling", SCALING),
        conda:
            "../../../environment.yml"
        log:
            "logs/scaling/aggregate.log",
        benchmark:
            "benchmarks/scaling/aggregate.tsv"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        shell:
            "transformer-hessian scaling aggregate --scaling {params.scaling:q} --parts {input:q} --out {output.json:q} "
            "--summary-out {output.summary:q} 2> {log:q}"


    SUMMARY_SECTIONS.append(("scaling", rules.scaling.output.summary))
