"""The ``transformer-hessian lm`` command (``train``, ``hessian``, ``vit-approx``, ``landscape``,
``landscape2d``, ``scaling-models``, ``scaling``, ``claims``), added to the package's parser by :func:`add_parser`."""

from __future__ import annotations

__all__ = ["add_parser"]


def _trained(p) -> None:
    """The trained decoder's checkpoint and its corpus record, arguments of several subcommands."""
    p.add_argument("--final", required=True, help="trained checkpoint (final.pt)")
    p.add_argument("--corpus", required=True, help="the training's corpus record (corpus.json)")


def _lm(a):
    from ...config.settings import Lm

    return Lm.from_dict(a.lm)


def _train(a) -> None:
    from .step import train_step

    train_step(_lm(a), a.data_root, a.out_dir, a.corpus_out, device=a.device)


def _hessian(a) -> None:
    from .step import hessian_step

    hessian_step(_lm(a), a.data_root, a.init, a.final, a.corpus, a.out, a.maps_out)


def _vit_approx(a) -> None:
    from ...config.settings import Experiment, Hessian
    from ..hessian_batch import hessian_inputs
    from .vit import vit_approx_step

    hessian = Hessian.from_dict(a.hessian)
    spec = Experiment.from_dict(a.spec, f"experiments.{hessian.experiment}")

    def batch(checkpoint):
        return hessian_inputs(checkpoint, spec, hessian, a.data_root, a.device)

    checkpoints = {"init": a.init, "trained": a.final}
    hessians = {"init": a.init_hessian, "trained": a.final_hessian}
    vit_approx_step(_lm(a), hessian.block, checkpoints, hessians, batch, a.out)


def _landscape(a) -> None:
    from .step import landscape_step

    landscape_step(_lm(a), a.data_root, a.final, a.corpus, a.out)


def _scaling_models(a) -> None:
    from .step import scaling_models_step

    scaling_models_step(_lm(a), a.part, a.jobs, a.data_root, a.cache_dir, a.out)


def _scaling(a) -> None:
    from .step import scaling_step

    scaling_step(_lm(a), a.parts, a.out)


def _claims(a) -> None:
    from .step import claims_step

    claims_step(
        _lm(a), a.hessian, a.landscape, a.scaling, a.metrics, a.out, a.summary_out, a.tables_dir, vit=a.vit_approx,
        landscape2d=a.landscape2d,
    )  # fmt: skip


def _landscape2d(a) -> None:
    from .curvature import landscape2d_step

    landscape2d_step(_lm(a), a.data_root, a.final, a.corpus, a.eigenvectors, a.curvature, a.out)


def add_parser(sub, json_arg, data_root_help: str) -> None:
    """Add ``lm <step>`` to the subparsers ``sub``."""
    s = sub.add_parser("lm", help="language-model study: a GPT-style decoder's Hessian, D_k, scaling law")
    ssub = s.add_subparsers(dest="lm_command", required=True)

    def common(p, data=True):
        p.add_argument("--lm", type=json_arg, required=True, help="the validated 'lm' config section (or @FILE)")
        if data:
            p.add_argument("--data-root", required=True, help=data_root_help)

    t = ssub.add_parser("train", help="train the study's decoder (resumable from its epoch checkpoints)")
    common(t)
    t.add_argument("--out-dir", required=True, help="folder of checkpoints/ and metrics.json")
    t.add_argument("--corpus-out", required=True, help="the corpus' record (JSON: name, files, sha256)")
    t.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    t.set_defaults(func=_train)
    h = ssub.add_parser("hessian", help="exact Hessian blocks at init and trained; curvature approximations")
    common(h)
    h.add_argument("--init", required=True, help="checkpoint at initialisation (init.pt)")
    _trained(h)
    h.add_argument("--out", required=True, help="output JSON")
    h.add_argument("--maps-out", required=True, help="print-size log10 |H| maps (npz)")
    h.set_defaults(func=_hessian)
    v = ssub.add_parser("vit-approx", help="the curvature approximations on the paper's ViT, for comparison")
    common(v)
    v.add_argument("--spec", type=json_arg, required=True, help="the Hessian experiment's config section")
    v.add_argument("--hessian", type=json_arg, required=True, help="the 'hessian' config section")
    v.add_argument("--init", required=True, help="the ViT's checkpoint at initialisation")
    v.add_argument("--final", required=True, help="the trained ViT's checkpoint")
    v.add_argument("--init-hessian", required=True, help="the hessian rule's npz at initialisation")
    v.add_argument("--final-hessian", required=True, help="the hessian rule's npz after training")
    v.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    v.add_argument("--out", required=True, help="output JSON")
    v.set_defaults(func=_vit_approx)
    ls = ssub.add_parser("landscape", help="D_k on sequences, Theorem 7 at w*, Assumption 1")
    common(ls)
    _trained(ls)
    ls.add_argument("--out", required=True, help="output JSON")
    ls.set_defaults(func=_landscape)
    l2 = ssub.add_parser(
        "landscape2d", help="the loss on the plane of the top two Hessian eigenvectors vs the quadratic model"
    )
    common(l2)
    _trained(l2)
    l2.add_argument("--eigenvectors", required=True, help="the curvature command's eigenvectors.pt")
    l2.add_argument("--curvature", required=True, help="the curvature command's curvature.json")
    l2.add_argument("--out", required=True, help="output JSON")
    l2.set_defaults(func=_landscape2d)
    m = ssub.add_parser("scaling-models", help="train and measure one part of the scaling grid (cached per model)")
    common(m)
    m.add_argument("--part", type=int, default=0, help="this job's part (0-based)")
    m.add_argument("--jobs", type=int, default=1, help="number of parts")
    m.add_argument("--cache-dir", required=True, help="per-model results <id>.json")
    m.add_argument("--out", required=True, help="output JSON of this part")
    m.set_defaults(func=_scaling_models)
    g = ssub.add_parser("scaling", help="the law L(N, D) and power laws in N over every part")
    common(g, data=False)
    g.add_argument("--parts", nargs="+", required=True, help="every part's JSON")
    g.add_argument("--out", required=True, help="output JSON")
    g.set_defaults(func=_scaling)
    c = ssub.add_parser("claims", help="the study's claim rows and its summary section")
    common(c, data=False)
    c.add_argument("--hessian", required=True, help="lm_hessian's JSON")
    c.add_argument("--landscape", required=True, help="lm_landscape's JSON")
    c.add_argument("--scaling", default=None, help="lm_scaling's JSON (absent when the grid is off)")
    c.add_argument("--vit-approx", default=None, help="lm_vit_approx's JSON (the approximations on the paper's ViT)")
    c.add_argument("--landscape2d", default=None, help="lm_landscape2d's JSON (absent when lm.curvature is off)")
    c.add_argument("--metrics", required=True, help="the decoder's metrics.json")
    c.add_argument("--out", required=True, help="claim rows (JSON list)")
    c.add_argument("--summary-out", required=True, help="the summary section (JSON)")
    c.add_argument("--tables-dir", default=None, help="also write the tables lm_approx, lm_scaling here")
    c.set_defaults(func=_claims)
