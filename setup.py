"""The one thing setup.cfg cannot declare: the optional C decoder of plain record batches.

``optional=True``: without a compiler the install still succeeds and
``storage.records.decode_columns`` uses its Python reference (same results, slower).
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
