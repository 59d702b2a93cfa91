"""The analysis context and what rules share: breakdowns, DMA, skew, layout, pipeline, utilization, hardware."""
