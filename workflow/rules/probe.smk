# Landscape probes around w* (Theorem 7 off w*, Taylor model, Assumption 1) and their figures:
# Figure 1 (a: measured L_k, L_{k+1} around w*; b: block diagram), Theorem 7 off w*, Figure 12
# and the Assumption 1 table. Computation: transformer_hessian.probe.


rule probe:
    input:
        checkpoint=f"results/{LEXP}/checkpoints/final.pt",
        init=f"results/{LEXP}/checkpoints/init.pt",
        manifest=f"{DATA_ROOT}/{config['experiments'][LEXP]['dataset']}/manifest.json",
    output:
        f"results/{LEXP}/probe/probe.json",
    params:
        data_root=data_root_of,
        spec=json.dumps(config["experiments"][LEXP]),
        probe=json.dumps({"experiment": LEXP, **config.get("probe", {})}),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        f"logs/probe/{LEXP}.log",
    benchmark:
        f"benchmarks/probe/{LEXP}.tsv"
    threads: 1
    resources:
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} probe --checkpoint {input.checkpoint:q} "
        "--init-checkpoint {input.init:q} --spec {params.spec:q} --probe {params.probe:q} "
        "--data-root {params.data_root:q} --device {params.device} --out {output:q} 2> {log:q}"


rule probe_figures:
    input:
        notebook=f"{NB}/probe_figures.ipynb",
        probe=f"results/{LEXP}/probe/probe.json",
        metrics=f"results/{LEXP}/metrics.json",
    output:
        fig1=figure("fig1", "fig1.rst"),
        fig1_png="paper/figures/fig1.png",
        theorem7=figure("theorem7", "theorem7.rst"),
        theorem7_png="paper/figures/theorem7.png",
        fig12=figure("fig12", "fig12.rst"),
        fig12_png="paper/figures/fig12.png",
        table=[
            report("paper/tables/assumption1.md", caption="../report/table_assumption1.rst", category="Tables"),
            "paper/tables/assumption1.csv",
            "paper/tables/assumption1.tex",
        ],
        executed="results/notebooks/probe_figures.ipynb",
    conda:
        "../../environment.yml"
    log:
        "logs/figures/probe_figures.log",
    benchmark:
        "benchmarks/figures/probe_figures.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
        "-p probe {input.probe:q} -p metrics {input.metrics:q} -p out_dir paper "
        "> {log:q} 2>&1"
