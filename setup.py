"""The one thing setup.cfg cannot declare: the optional C extensions ``storage._fastrecords``
(the decoder of plain record batches and the record walk of produce validation) and
``logmarshal._fastproduce`` (the Producer's delivery reports, batch encoder and murmur2).

``optional=True``: without a compiler the install still succeeds and
``storage.records.decode_columns``, ``storage.validation`` and the Producer use their Python
references (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "storage._fastrecords",
            sources=["storage/_fastrecords.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "logmarshal._fastproduce",
            sources=["logmarshal/_fastproduce.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
