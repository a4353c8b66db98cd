"""Data files the builders read; their bytes are part of the keys of the steps that read them.

texts/calibration.txt  quantization calibration text
texts/eval.txt         the text scored for perplexity and next-token agreement
audio/*.wav            the clips speech recipes validate on
audio.py               the formulas that wrote those clips (`python -m builders.data.audio`)
"""
