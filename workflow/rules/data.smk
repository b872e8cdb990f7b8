# Download (or locate) a data set and verify its checksums. digits is bundled with scikit-learn.
# A local rule: on a cluster it runs on the submit host (compute nodes often have no internet).


localrules:
    download,


rule download:
    output:
        manifest=f"{DATA_ROOT}/{{dataset}}/manifest.json",
    params:
        mirror=lambda w: (
            f"--mirror {config['data']['mirror']}" if config["data"]["mirror"] else ""
        ),
    conda:
        "../../environment.yml"
    log:
        "logs/download/{dataset}.log",
    benchmark:
        "benchmarks/download/{dataset}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=60,
    shell:
        "transformer-hessian download --dataset {wildcards.dataset} {params.mirror} "
        "--manifest {output.manifest:q} 2> {log:q}"
