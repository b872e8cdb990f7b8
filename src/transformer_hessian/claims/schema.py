"""The shared claim-row schema; it lives in :mod:`transformer_hessian.util.claim_schema` (below the studies that
write rows) and is re-exported here."""

from __future__ import annotations

from ..util.claim_schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, ROW_KEYS, VERDICTS, validate_row, verdict

__all__ = ["NOT_REPRODUCED", "NOT_TESTABLE", "REPRODUCED", "ROW_KEYS", "VERDICTS", "validate_row", "verdict"]
