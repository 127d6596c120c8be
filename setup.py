"""The one thing setup.cfg cannot declare: the optional C extensions ``storage._fastrecords``
(the decoder of plain record batches and the record walk of produce validation),
``logmarshal._fastproduce`` (the Producer's delivery reports, batch encoder and murmur2),
``logmarshal._fastconsume`` (the Consumer's Messages out of the cyclic GC's sight) and
``rationalizer._vectors`` (the task lane's reader of position vectors).

``optional=True``: without a compiler the install still succeeds and
``storage._records.decode_columns``, ``storage._validation``, the Producer and
``rationalizer._task_vectors`` use their Python references (same results, slower).
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
        Extension(
            "logmarshal._fastconsume",
            sources=["logmarshal/_fastconsume.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "rationalizer._vectors",
            sources=["rationalizer/_vectors.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
