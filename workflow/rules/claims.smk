# A verdict on each empirical claim of the paper (transformer_hessian.claims), computed from the
# results; paper/claims.md holds the table, the recap printed last (onsuccess, Snakefile) the counts.

# JSON lists of finished claim rows written by other rules (passed as --rows): CLAIM_ROW_FILES, which
# the rule files included before this one fill (Snakefile).


rule claims:
    input:
        hessian_init=expand(rules.hessian.output.npz, exp=HEXP, stage="init"),
        init=expand(rules.hessian.output.norms, exp=HEXP, stage="init"),
        trained=expand(rules.hessian.output.norms, exp=HEXP, stage="trained"),
        metrics_hessian=expand(rules.train.output.metrics, exp=HEXP),
        metrics_landscape=expand(rules.train.output.metrics, exp=LEXP),
        landscape=expand(rules.landscape.output.json, exp=LEXP),
        rows=CLAIM_ROW_FILES,
    output:
        md="paper/claims.md",
        json="paper/claims.json",
    params:
        config_hash=CONFIG_HASH,
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
        "--landscape {input.landscape:q} {params.rows_args} --config-hash {params.config_hash:q} "
        "--out-md {output.md:q} --out-json {output.json:q} 2> {log:q}"
