# Train one experiment; resumes from its last epoch checkpoint after an interruption.


rule train:
    input:
        manifest=manifest_of,
    output:
        **produced("train"),  # init, final (checkpoints), metrics
    params:
        data_root=data_root_of,
        spec=spec_file,
        out=lambda w, output: os.path.dirname(output.metrics),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        "logs/train/{exp}.log",
    benchmark:
        "benchmarks/train/{exp}.tsv"
    # torch's intra-op threads: REPLAY_THREADS (common.smk; the dynamics rule replays with the same
    # number; one thread changes the trained weights and flips fig6_slope on the embedded default);
    # the cores reserved: one on the local executor (REPLAY_CORES).
    threads: REPLAY_CORES
    # Scheduling: among the jobs ready at once, snakemake starts those of higher priority first. The
    # priorities follow the longest chain of jobs after each (critical-path order, measured on the
    # embedded default): train 30, hessian 20, dynamics, probe and theory 10, the other studies'
    # computations (bounds, landscape, spectrum, architectures, scaling) and the figure rules that
    # draw several figures (the longest notebooks) 5, the rest 0; so that no long job is left for
    # the end of the run while the other core idles. Priorities change no result.
    priority: 30
    resources:
        **REPLAY_RESOURCES,
    shell:
        "transformer-hessian --threads {resources.torch_threads} train --experiment {wildcards.exp:q} --spec {params.spec:q} "
        "--data-root {params.data_root:q} --out {params.out:q} --device {params.device:q} 2> {log:q}"
