"""The one thing setup.cfg cannot declare: the optional C extension ``storage._fastrecords``
(the decoder of plain record batches and the record walk of produce validation).

``optional=True``: without a compiler the install still succeeds and
``storage.records.decode_columns`` and ``storage.validation`` use their Python references
(same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "storage._fastrecords",
            sources=["storage/_fastrecords.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
