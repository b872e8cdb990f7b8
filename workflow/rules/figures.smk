# Figures (papermill-executed notebooks), tables and the machine-readable summary.

rule fig3_fig4:
    input:
        notebook=f"{NB}/fig3_fig4_hessian_heatmaps.ipynb",
        init=f"{HDIR}/init.npz",
        trained=f"{HDIR}/trained.npz",
    output:
        fig3=figure("fig3", "fig3.rst"),
        fig3_png="paper/figures/fig3.png",
        fig4=figure("fig4", "fig4.rst"),
        fig4_png="paper/figures/fig4.png",
        executed="results/notebooks/fig3_fig4_hessian_heatmaps.ipynb",
    conda:
        "../../environment.yml"
    log:
        "logs/figures/fig3_fig4.log",
    benchmark:
        "benchmarks/figures/fig3_fig4.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
        "-p hessian_init {input.init:q} -p hessian_trained {input.trained:q} "
        "-p out_fig3 paper/figures/fig3 -p out_fig4 paper/figures/fig4 > {log:q} 2>&1"


rule fig5:
    input:
        notebook=f"{NB}/fig5_norms.ipynb",
        init=f"{HDIR}/init_norms.json",
        trained=f"{HDIR}/trained_norms.json",
    output:
        fig5=figure("fig5", "fig5.rst"),
        fig5_png="paper/figures/fig5.png",
        executed="results/notebooks/fig5_norms.ipynb",
    conda:
        "../../environment.yml"
    log:
        "logs/figures/fig5.log",
    benchmark:
        "benchmarks/figures/fig5.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
        "-p norms_init {input.init:q} -p norms_trained {input.trained:q} "
        "-p out_fig5 paper/figures/fig5 > {log:q} 2>&1"


rule fig6:
    input:
        notebook=f"{NB}/fig6_landscape.ipynb",
        landscape=f"results/{LEXP}/landscape/landscape.json",
    output:
        fig6=figure("fig6", "fig6.rst"),
        fig6_png="paper/figures/fig6.png",
        executed="results/notebooks/fig6_landscape.ipynb",
    conda:
        "../../environment.yml"
    log:
        "logs/figures/fig6.log",
    benchmark:
        "benchmarks/figures/fig6.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "papermill {input.notebook:q} {output.executed:q} -k python3 --log-output "
        "-p landscape {input.landscape:q} -p out_fig6 paper/figures/fig6 > {log:q} 2>&1"


rule tables:
    input:
        init=f"{HDIR}/init_norms.json",
        trained=f"{HDIR}/trained_norms.json",
        metrics=expand("results/{exp}/metrics.json", exp=sorted({HEXP, LEXP})),
        theory=expand("results/{exp}/theory/{stage}.json", exp=HEXP, stage=STAGES),
    output:
        [
            report(
                f"paper/tables/{t}.{ext}",
                caption=f"../report/table_{t}.rst",
                category="Tables",
            )
            if ext == "md"
            else f"paper/tables/{t}.{ext}"
            for t in TABLES
            for ext in ("csv", "tex", "md")
        ],
    conda:
        "../../environment.yml"
    log:
        "logs/tables.log",
    benchmark:
        "benchmarks/tables.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian tables --norms-init {input.init:q} --norms-trained {input.trained:q} "
        "--metrics {input.metrics:q} --theory {input.theory:q} --out-dir paper/tables 2> {log:q}"


rule summary:
    input:
        norms=expand(f"{HDIR}/{{stage}}_norms.json", stage=STAGES),
        metrics=expand("results/{exp}/metrics.json", exp=sorted({HEXP, LEXP})),
        landscape=f"results/{LEXP}/landscape/landscape.json",
        theory=expand("results/{exp}/theory/{stage}.json", exp=HEXP, stage=STAGES),
        figures=expand("paper/figures/{fig}.pdf", fig=FIGURES),
        tables=expand("paper/tables/{table}.csv", table=TABLES),
    output:
        "paper/summary.json",
    params:
        config_hash=CONFIG_HASH,
    conda:
        "../../environment.yml"
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian summary --config-hash {params.config_hash:q} --norms {input.norms:q} "
        "--metrics {input.metrics:q} --landscape {input.landscape:q} --theory {input.theory:q} "
        "--figures {input.figures:q} --tables {input.tables:q} --out {output:q} 2> {log:q}"
