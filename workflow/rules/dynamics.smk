# Appendix A.1 (Figures 7-11): replay the first training steps of the Hessian experiment from its
# init checkpoint and record weights, norms and nine-group Hessian blocks (drawn by the registry's
# fig7_fig11 rule); Table 1.

DDIR = f"results/{HEXP}/dynamics"


rule dynamics:
    input:
        checkpoint=f"results/{HEXP}/checkpoints/init.pt",
        manifest=f"{DATA_ROOT}/{config['experiments'][HEXP]['dataset']}/manifest.json",
        saved_init=f"{HDIR}/init.npz",
    output:
        npz=f"{DDIR}/dynamics.npz",
        json=f"{DDIR}/dynamics.json",
    params:
        data_root=data_root_of,
        spec=json.dumps(config["experiments"][HEXP]),
        hessian=json.dumps(config["hessian"]),
        dynamics=json.dumps(config["dynamics"]),
        device=config["device"],
        tolerance=config["theory"]["tolerance"],
    conda:
        "../../environment.yml"
    log:
        "logs/dynamics/dynamics.log",
    benchmark:
        "benchmarks/dynamics/dynamics.tsv"
    # dynamics and fig7_fig11 are the longest chain after training: start them first
    priority: 10
    threads: 1
    resources:
        gpu=config["resources"]["gpu"],
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} dynamics --checkpoint {input.checkpoint:q} --spec {params.spec:q} "
        "--hessian {params.hessian:q} --dynamics {params.dynamics:q} --data-root {params.data_root:q} "
        "--device {params.device:q} --saved-init-hessian {input.saved_init:q} --tolerance {params.tolerance:q} "
        "--out-npz {output.npz:q} --out-json {output.json:q} 2> {log:q}"


rule table1:
    input:
        metrics=expand("results/{exp}/metrics.json", exp=sorted({HEXP, LEXP})),
    output:
        report("paper/tables/table1.md", caption="../report/table_table1.rst", category="Tables"),
        "paper/tables/table1.csv",
        "paper/tables/table1.tex",
    params:
        config=json.dumps({k: config[k] for k in ("experiments", "hessian", "landscape")}),
    conda:
        "../../environment.yml"
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
        "--out-dir paper/tables 2> {log:q}"
