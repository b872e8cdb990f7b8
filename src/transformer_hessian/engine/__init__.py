"""The exact-Hessian engine for any torch model: a front end that captures the model
(:mod:`.capture`), one contract every operation implements (:mod:`.contract`), the rules by kind
(:mod:`.ops`), the sweeps (:mod:`.sweep`) and the calls people use (:mod:`.api`)."""
