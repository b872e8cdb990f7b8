# Language-model study beyond the paper (transformer_hessian.studies.lm), its rules only when
# lm.enabled is true: a GPT-style decoder trained on byte tokens (lm_train), its exact Hessian blocks
# and the curvature approximations (lm_hessian), D_k, Theorem 7 and Assumption 1 on sequences
# (lm_landscape), the scaling grid in lm.scaling.jobs parts (lm_scaling_models, cached per model in
# results/lm/scaling/models/) and its law (lm_scaling), with lm.curvature.enabled the curvature over the
# whole training set (lm_curvature, the package's curvature command under torchrun) and the loss on the
# plane of its top two eigenvectors (lm_landscape2d), the claim rows and summary section (lm_claims).
# The figures come from the registry (studies/lm/registry.py).


if config["lm"]["enabled"]:

    LM = config["lm"]
    LM_SCALING = LM["scaling"]["enabled"]
    LM_TABLES = ["lm_approx", "lm_scaling"] if LM_SCALING else ["lm_approx"]
    LM_CURVATURE = LM["curvature"]["enabled"]


    rule lm_train:
        output:
            **produced("lm_train"),  # init, final, metrics, corpus
        params:
            lm=settings_file("lm", LM),
            data_root=config["data"]["root"],
            device=config["device"],
            out_dir=lambda w, output: os.path.dirname(output.metrics),
        conda:
            "../../../environment.yml"
        priority: 30
        log:
            "logs/lm/train.log",
        benchmark:
            "benchmarks/lm/train.tsv"
        threads: 1
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} lm train --lm {params.lm:q} --data-root {params.data_root:q} "
            "--out-dir {params.out_dir:q} --corpus-out {output.corpus:q} --device {params.device:q} 2> {log:q}"


    rule lm_hessian:
        input:
            init=rules.lm_train.output.init,
            final=rules.lm_train.output.final,
            corpus=rules.lm_train.output.corpus,
        output:
            **produced("lm_hessian"),  # json, maps
        params:
            lm=settings_file("lm", LM),
            data_root=config["data"]["root"],
        conda:
            "../../../environment.yml"
        priority: 20  # the longest job of the study: start it as soon as the model is trained
        log:
            "logs/lm/hessian.log",
        benchmark:
            "benchmarks/lm/hessian.tsv"
        threads: 2
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} lm hessian --lm {params.lm:q} --data-root {params.data_root:q} "
            "--init {input.init:q} --final {input.final:q} --corpus {input.corpus:q} --out {output.json:q} "
            "--maps-out {output.maps:q} 2> {log:q}"


    # The same approximations on the paper's ViT (the Hessian study's model, block and batch) against
    # the exact Hessian that rule hessian saved and rule theory checked, for comparison.
    LM_VIT = config["hessian"]["experiment"]


    rule lm_vit_approx:
        input:
            init=expand(rules.train.output.init, exp=LM_VIT),
            final=expand(rules.train.output.final, exp=LM_VIT),
            init_hessian=expand(rules.hessian.output.npz, exp=LM_VIT, stage="init"),
            final_hessian=expand(rules.hessian.output.npz, exp=LM_VIT, stage="trained"),
            theory=expand(rules.theory.output.json, exp=LM_VIT, stage=["init", "trained"]),
            manifest=manifest(experiment(LM_VIT)["dataset"]),
        output:
            **produced("lm_vit_approx"),  # json
        params:
            lm=settings_file("lm", LM),
            spec=settings_file(f"spec_{LM_VIT}", experiment(LM_VIT)),
            hessian=STAGE_PARAMS["hessian"],
            data_root=data_root_of,
            device=config["device"],
        conda:
            "../../../environment.yml"
        log:
            "logs/lm/vit_approx.log",
        benchmark:
            "benchmarks/lm/vit_approx.tsv"
        threads: 1
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} lm vit-approx --lm {params.lm:q} --spec {params.spec:q} "
            "--hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
            "--init {input.init:q} --final {input.final:q} --init-hessian {input.init_hessian:q} "
            "--final-hessian {input.final_hessian:q} --out {output.json:q} 2> {log:q}"


    rule lm_landscape:
        input:
            final=rules.lm_train.output.final,
            corpus=rules.lm_train.output.corpus,
        output:
            **produced("lm_landscape"),  # json
        params:
            lm=settings_file("lm", LM),
            data_root=config["data"]["root"],
        conda:
            "../../../environment.yml"
        log:
            "logs/lm/landscape.log",
        benchmark:
            "benchmarks/lm/landscape.tsv"
        threads: 1
        resources:
            **MODEL_RESOURCES,
        shell:
            "transformer-hessian --threads {threads} lm landscape --lm {params.lm:q} --data-root {params.data_root:q} "
            "--final {input.final:q} --corpus {input.corpus:q} --out {output.json:q} 2> {log:q}"


    if LM_CURVATURE:

        # The curvature of the trained decoder over its whole training set: the package's curvature
        # command with the study's factory (studies/lm/curvature.py: the decoder in float64 and every
        # training sequence in batches; each process takes batches[rank::processes]). More than one
        # process: torchrun starts them (one torch thread each); one: the command itself.
        # Resources: the processes are one job's: `threads` (local scheduler) and `cpus_per_task`
        # (SLURM, MODEL_RESOURCES) are lm.curvature.processes, `tasks` stays 1: the slurm plugin runs
        # every non-MPI job as one `srun -n1 --cpus-per-task` step, inside which torchrun forks the
        # processes (--ntasks=N would allocate CPUs that the step cannot use).
        LM_CURV = LM["curvature"]

        # The factory's keyword arguments travel in a settings file (its name holds its hash), so that the
        # command line stays short: {"settings": FILE} (studies.lm.curvature.training_set reads it).
        LM_CURVATURE_FACTORY = settings_file(
            "lm_curvature_factory",
            {
                "checkpoint": produced("lm_train")["final"],
                "corpus": produced("lm_train")["corpus"],
                "data_root": config["data"]["root"],
                "lm": settings_file("lm", LM).removeprefix("@"),
                "batch_size": LM_CURV["batch_size"],
            },
        ).removeprefix("@")

        rule lm_curvature:
            input:
                final=rules.lm_train.output.final,
                corpus=rules.lm_train.output.corpus,
            output:
                **produced("lm_curvature"),  # json, eigenvectors, png (one folder, the command's --out)
            params:
                lm=settings_file("lm", LM),
                factory="transformer_hessian.studies.lm.curvature:training_set",
                factory_args=json.dumps({"settings": LM_CURVATURE_FACTORY}),
                out_dir=lambda w, output: os.path.dirname(output.json),
                launch_args=(
                    f"torchrun --standalone --nproc-per-node {LM_CURV['processes']} -m transformer_hessian"
                    if LM_CURV["processes"] > 1
                    else "transformer-hessian"
                ),
                blocks_args=" ".join(["--blocks", *map(shlex.quote, LM_CURV["blocks"])]) if LM_CURV["blocks"] else "",
                options_args=(
                    f"--loss causal_lm --top-k {LM_CURV['top_k']} --lanczos-steps {LM_CURV['lanczos_steps']} "
                    f"--probes {LM_CURV['probes']} --slq-probes {LM_CURV['slq_probes']} --seed {LM['seed']} "
                    f"--block-steps {LM_CURV['lanczos_steps']} --block-probes {LM_CURV['probes']}"
                ),
            conda:
                "../../../environment.yml"
            priority: 20  # long, and lm_landscape2d waits for it
            log:
                "logs/lm/curvature.log",
            benchmark:
                "benchmarks/lm/curvature.tsv"
            threads: LM_CURV["processes"]
            resources:
                **MODEL_RESOURCES,
            shell:
                "OMP_NUM_THREADS=1 {params.launch_args} --threads 1 curvature --factory {params.factory:q} "
                "--factory-args {params.factory_args:q} {params.options_args} {params.blocks_args} --eigenvectors "
                "--out {params.out_dir:q} 2> {log:q}"


        rule lm_landscape2d:
            input:
                final=rules.lm_train.output.final,
                corpus=rules.lm_train.output.corpus,
                eigenvectors=rules.lm_curvature.output.eigenvectors,
                curvature=rules.lm_curvature.output.json,
            output:
                **produced("lm_landscape2d"),  # json
            params:
                lm=settings_file("lm", LM),
                data_root=config["data"]["root"],
            conda:
                "../../../environment.yml"
            log:
                "logs/lm/landscape2d.log",
            benchmark:
                "benchmarks/lm/landscape2d.tsv"
            threads: 1
            resources:
                **MODEL_RESOURCES,
            shell:
                "transformer-hessian --threads {threads} lm landscape2d --lm {params.lm:q} --data-root {params.data_root:q} "
                "--final {input.final:q} --corpus {input.corpus:q} --eigenvectors {input.eigenvectors:q} "
                "--curvature {input.curvature:q} --out {output.json:q} 2> {log:q}"


    if LM_SCALING:

        rule lm_scaling_models:
            output:
                **produced("lm_scaling_models"),  # json (wildcards part, jobs)
            wildcard_constraints:
                part="[0-9]+",
                jobs="[0-9]+",
            params:
                lm=settings_file("lm", LM),
                data_root=config["data"]["root"],
            conda:
                "../../../environment.yml"
            log:
                "logs/lm/scaling_part{part}of{jobs}.log",
            benchmark:
                "benchmarks/lm/scaling_part{part}of{jobs}.tsv"
            threads: 1
            resources:
                **MODEL_RESOURCES,
            shell:
                "transformer-hessian --threads {threads} lm scaling-models --lm {params.lm:q} "
                "--data-root {params.data_root:q} --part {wildcards.part:q} --jobs {wildcards.jobs:q} "
                "--cache-dir results/lm/scaling/models --out {output.json:q} 2> {log:q}"


        rule lm_law:
            input:
                expand(
                    rules.lm_scaling_models.output.json,
                    part=range(LM["scaling"]["jobs"]),
                    jobs=LM["scaling"]["jobs"],
                ),
            output:
                **produced("lm_law"),  # json
            params:
                lm=settings_file("lm", LM),
            conda:
                "../../../environment.yml"
            log:
                "logs/lm/law.log",
            benchmark:
                "benchmarks/lm/law.tsv"
            threads: 1
            resources:
                mem_mb=2000,
                runtime=20,
            shell:
                "transformer-hessian lm scaling --lm {params.lm:q} --parts {input:q} --out {output.json:q} 2> {log:q}"


    rule lm_claims:
        input:
            hessian=rules.lm_hessian.output.json,
            landscape=rules.lm_landscape.output.json,
            metrics=rules.lm_train.output.metrics,
            vit_approx=rules.lm_vit_approx.output.json,
            scaling=[rules.lm_law.output.json] if LM_SCALING else [],
            landscape2d=[rules.lm_landscape2d.output.json] if LM_CURVATURE else [],
        output:
            **produced("lm_claims"),  # claims, summary
            tables=table_files(LM_TABLES),
        params:
            lm=settings_file("lm", LM),
            scaling=lambda w, input: f"--scaling {shlex.quote(input.scaling[0])}" if input.scaling else "",
            landscape2d_args=lambda w, input: (
                f"--landscape2d {shlex.quote(input.landscape2d[0])}" if input.landscape2d else ""
            ),
        conda:
            "../../../environment.yml"
        log:
            "logs/lm/claims.log",
        benchmark:
            "benchmarks/lm/claims.tsv"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        shell:
            "transformer-hessian lm claims --lm {params.lm:q} --hessian {input.hessian:q} "
            "--landscape {input.landscape:q} --vit-approx {input.vit_approx:q} {params.scaling} {params.landscape2d_args} --metrics {input.metrics:q} --out {output.claims:q} "
            "--summary-out {output.summary:q} --tables-dir paper/tables 2> {log:q}"


    ALL_TABLES.extend(LM_TABLES)
    CLAIM_ROW_FILES.append((90, rules.lm_claims.output.claims))
    SUMMARY_SECTIONS.append(("lm", rules.lm_claims.output.summary))
