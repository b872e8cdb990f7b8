"""The dense-Hessian methods the benchmark compares, their labels and the agreement required."""

#: Relative agreement with (a) required of every method (float64).
TOLERANCE = 1e-10


#: (label, method key, description), in the order they run for each width ((a) first).
METHODS = (
    ("a", "curvlinops", "curvlinops HessianLinearOperator @ I (hessian.hessian_curvlinops: 64-column blocks of I)"),
    ("b", "torch_func_hessian", "torch.func.hessian of the flat-vector loss"),
    ("c", "closed_form", "closed form (theory.model_loss_hessian)"),
    ("d", "pipeline", "pipeline: compute_hessian(method='auto')"),
    ("e", "vmap", "chunked vmapped HVPs (hessian_vmap)"),
)


#: Run only where (a) did not finish (out of memory / timeout); it then serves as the width's
#: reference. Independent of how hessian_curvlinops chunks (curvlinops 3 vmaps its HVP over all
#: columns of the matrix it is applied to, which needs tens of GiB for I at d = 16).
FALLBACK = ("a'", "curvlinops_chunked", "curvlinops HessianLinearOperator @ I, 256-column blocks (fallback reference)")


CHUNK_COLUMNS = 256


LABELS = {label: key for label, key, _ in (*METHODS, FALLBACK)}


DESCRIPTIONS = {key: desc for _, key, desc in (*METHODS, FALLBACK)}
