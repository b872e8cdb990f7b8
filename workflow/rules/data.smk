# Download (or locate) a data set and verify its checksums. digits is bundled with scikit-learn.
# A local rule: on a cluster it runs on the submit host (compute nodes often have no internet).


localrules:
    download,


rule download:
    output:
        manifest=f"{DATA_ROOT}/{{dataset}}/manifest.json",
    params:
        # One quoted argument ('' = torchvision's mirrors), validated as an http(s) URL; a function,
        # so that braces in the URL are not taken for wildcards.
        mirror=lambda w: config["data"]["mirror"] or "",
        deadline=config["data"].get("deadline", 3600),
        # data.local: a folder with the files already ('' = none); then no network is used.
        local=lambda w: config["data"].get("local") or "",
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
        "transformer-hessian download --dataset {wildcards.dataset:q} --mirror={params.mirror:q} "
        "--deadline {params.deadline:q} --local={params.local:q} --manifest {output.manifest:q} 2> {log:q}"
