# Appendix A.1 (Figures 7-11): replay the first training steps of the Hessian experiment from its
# init checkpoint and record weights, norms and nine-group Hessian blocks; Table 1.

DDIR = f"results/{HEXP}/dynamics"
DYN_FIGURES = ["fig7", "fig8", "fig9", "fig10", "fig11"]


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
    threads: 1
    resources:
        gpu=config["resources"]["gpu"],
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} dynamics --checkpoint {input.checkpoint:q} --spec {params.spec:q} "
        "--hessian {params.hessian:q} --dynamics {params.dynamics:q} --data-root {params.data_root:q} "
        "--device {params.device} --saved-init-hessian {input.saved_init:q} --tolerance {params.tolerance} "
        "--out-npz {output.npz:q} --out-json {output.json:q} 2> {log:q}"


rule fig7_fig11:
    input:
        notebook=f"{NB}/fig7_fig11_dynamics.ipynb",
        npz=f"{DDIR}/dynamics.npz",
        json=f"{DDIR}/dynamics.json",
        checks=expand("results/{exp}/theory/{stage}.json", exp=HEXP, stage=STAGES),
    output:
        [figure(f, f"{f}.rst") for f in DYN_FIGURES],
        [f"paper/figures/{f}.png" for f in DYN_FIGURES],
        executed="results/notebooks/fig7_fig11_dynamics.ipynb",
    conda:
        "../../environment.yml"
    log:
        "logs/figures/fig7_fig11.log",
    benchmark:
        "benchmarks/figures/fig7_fig11.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
        "-p dynamics_npz {input.npz:q} -p dynamics_json {input.json:q} -p out_dir paper/figures > {log:q} 2>&1"


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
