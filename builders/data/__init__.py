"""Data files the builders read; their bytes are part of the keys of the steps that read them.

texts.py               where the texts are: builders reach texts/ through it
texts/calibration.txt  quantization calibration text
texts/eval.txt         the text scored for perplexity and next-token agreement
audio.py               the clips' paths, and the formulas that wrote them
                       (`python -m builders.data.audio`)
audio/*.wav            the clips speech recipes validate on
images.py              where the images are: builders reach images/ through it
images/                the pictures vision-language recipes validate on, and the
                       make_images.py that drew them

A module's data is the folder of its name beside it (kiln.plan.toolchain): importing
builders.data.texts puts texts/ into a step's code digest, builders.data.audio audio/.
"""
