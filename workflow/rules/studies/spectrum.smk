# Matrix-free curvature of the deep (landscape) model: top Hessian eigenvalues of every block's
# five groups and of the whole model, Hutchinson traces, SLQ spectral densities and Figure 5's
# block-pair spectral norms for every block. Computation: transformer_hessian.studies.spectrum; the
# figure's rule (spectrum) comes from the figure registry (its studies/spectrum/registry.py). The
# summary section goes to SUMMARY_SECTIONS (the summary rule, figures.smk).

# spectrum.experiment (null: landscape.experiment) is checked with the rest of the config.
SEXP = config.get("spectrum", {}).get("experiment") or LEXP  # the deep model of the spectrum rule


rule spectrum_compute:
    input:
        checkpoint=expand(rules.train.output.final, exp=SEXP),
        manifest=manifest(experiment(SEXP)["dataset"]),
    output:
        **produced("spectrum_compute", exp=SEXP),  # json, summary
    params:
        data_root=data_root_of,
        spec=settings_file(f"spec_{SEXP}", experiment(SEXP)),
        spectrum=settings_file("spectrum", {**config.get("spectrum", {}), "experiment": SEXP}),
        device=config["device"],
    conda:
        "../../../environment.yml"
    log:
        f"logs/spectrum/{SEXP}.log",
    benchmark:
        f"benchmarks/spectrum/{SEXP}.tsv"
    # scheduling (train.smk): before the short figure jobs, so that its figure does not end the run
    priority: 5
    # spectrum.threads (the embedded default: 1, which leaves the other core to another job)
    threads: config["spectrum"]["threads"]
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} spectrum --checkpoint {input.checkpoint:q} "
        "--spec {params.spec:q} --spectrum {params.spectrum:q} --data-root {params.data_root:q} "
        "--device {params.device:q} --out {output.json:q} --summary-out {output.summary:q} 2> {log:q}"


SUMMARY_SECTIONS.append(("spectrum", rules.spectrum_compute.output.summary))
