# A verdict on each empirical claim of the paper (transformer_hessian.claims), computed from the
# results; paper/claims.md is printed at the end of every successful run (onsuccess, Snakefile).

# Results of other modules with a claims.PROVIDERS entry: name -> path (passed as --extra).
CLAIM_EXTRA_INPUTS = {"probe": f"results/{LEXP}/probe/probe.json"}
# JSON lists of finished claim rows written by other rules (passed as --rows).
CLAIM_ROW_FILES = [f"results/{HEXP}/bounds/claim_rows.json"]


rule claims:
    input:
        hessian_init=f"{HDIR}/init.npz",
        init=f"{HDIR}/init_norms.json",
        trained=f"{HDIR}/trained_norms.json",
        metrics_hessian=f"results/{HEXP}/metrics.json",
        metrics_landscape=f"results/{LEXP}/metrics.json",
        landscape=f"results/{LEXP}/landscape/landscape.json",
        extra=list(CLAIM_EXTRA_INPUTS.values()),
        rows=CLAIM_ROW_FILES,
    output:
        md="paper/claims.md",
        json="paper/claims.json",
    params:
        config_hash=CONFIG_HASH,
        extra_args=" ".join(f"--extra {shlex.quote(f'{k}={v}')}" for k, v in CLAIM_EXTRA_INPUTS.items()),
        rows_args=" ".join(f"--rows {shlex.quote(p)}" for p in CLAIM_ROW_FILES),
    conda:
        "../../environment.yml"
    log:
        "logs/claims.log",
    benchmark:
        "benchmarks/claims.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian claims --hessian-init {input.hessian_init:q} --norms-init {input.init:q} --norms-trained {input.trained:q} "
        "--metrics-hessian {input.metrics_hessian:q} --metrics-landscape {input.metrics_landscape:q} "
        "--landscape {input.landscape:q} {params.extra_args} {params.rows_args} --config-hash {params.config_hash:q} "
        "--out-md {output.md:q} --out-json {output.json:q} 2> {log:q}"
