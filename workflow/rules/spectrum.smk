# Matrix-free curvature of the deep (landscape) model: top Hessian eigenvalues of every block's
# five groups and of the whole model, Hutchinson traces, SLQ spectral densities and Figure 5's
# block-pair spectral norms for every block. Computation: transformer_hessian.spectrum; the
# figure's rule (spectrum) comes from the figure registry (transformer_hessian.registry).

# spectrum.experiment (null: landscape.experiment) is checked with the rest of the config.


rule spectrum_compute:
    input:
        checkpoint=expand(rules.train.output.final, exp=SEXP),
        manifest=manifest(experiment(SEXP)["dataset"]),
    output:
        json=f"results/spectrum/{SEXP}.json",
    params:
        data_root=data_root_of,
        spec=settings_file(f"spec_{SEXP}", experiment(SEXP)),
        spectrum=settings_file("spectrum", {**config.get("spectrum", {}), "experiment": SEXP}),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        f"logs/spectrum/{SEXP}.log",
    benchmark:
        f"benchmarks/spectrum/{SEXP}.tsv"
    threads: 4
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} spectrum --checkpoint {input.checkpoint:q} "
        "--spec {params.spec:q} --spectrum {params.spectrum:q} --data-root {params.data_root:q} "
        "--device {params.device:q} --out {output:q} 2> {log:q}"
