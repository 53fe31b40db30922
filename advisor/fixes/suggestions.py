"""Fixes a rule may propose that advisor cannot apply at run time: shown as suggestions, never
trialled, never in fixes.patch."""

from __future__ import annotations

from advisor.fixes.base import Fix


class _Suggestion(Fix):
    kind = "suggestion"

    def describe(self, params):
        return f"{self.name} (a suggestion: advisor cannot trial it)"

    def not_applicable(self, config, environment, params):
        return "advisor cannot apply it at run time"

    def candidates(self, params, environment):
        return []


class Uint8Inputs(_Suggestion):
    name = "uint8-inputs"


class ExpandableSegments(_Suggestion):
    name = "expandable-segments"


class GradScaler(_Suggestion):
    name = "grad-scaler"


class OverlapCommunication(_Suggestion):
    name = "overlap-communication"


class CudaGraphs(_Suggestion):
    name = "cuda-graphs"


class DynamicShapes(_Suggestion):
    name = "dynamic-shapes"
