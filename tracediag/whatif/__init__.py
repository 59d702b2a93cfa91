"""The changes a finding proposes (peer pace, DMA restore, ...) as what-ifs for replay."""
