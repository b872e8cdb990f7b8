# A verdict on each empirical claim of the paper (transformer_hessian.claims), computed from the
# results; paper/claims.md holds the table, the recap printed last (onsuccess, Snakefile) the counts.

# JSON lists of finished claim rows written by the studies' rules (passed as --rows): CLAIM_ROW_FILES,
# (RANK, path) pairs that the rule files included before this one fill (Snakefile), in rank order;
# the pipeline's own rows (training accuracy) take their place at OWN_CLAIMS_RANK.
OWN_CLAIMS_RANK = 20
CLAIM_ROWS = [path for _, path in sorted(CLAIM_ROW_FILES, key=lambda pair: pair[0])]


rule claims:
    input:
        metrics_hessian=expand(rules.train.output.metrics, exp=HEXP),
        metrics_landscape=expand(rules.train.output.metrics, exp=LEXP),
        rows=CLAIM_ROWS,
    output:
        md="paper/claims.md",
        json="paper/claims.json",
    params:
        config_hash=CONFIG_HASH,
        rows_args=" ".join(f"--rows {shlex.quote(p)}" for p in CLAIM_ROWS),
        own_rows_at=sum(rank < OWN_CLAIMS_RANK for rank, _ in CLAIM_ROW_FILES),
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
        "transformer-hessian claims --metrics-hessian {input.metrics_hessian:q} "
        "--metrics-landscape {input.metrics_landscape:q} {params.rows_args} --own-rows-at {params.own_rows_at:q} "
        "--config-hash {params.config_hash:q} "
        "--out-md {output.md:q} --out-json {output.json:q} 2> {log:q}"
