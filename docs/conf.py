"""Sphinx configuration: the guide and the API reference, built from the docstrings.

Build locally: ``pip install -e ".[docs]"`` then
``python -m sphinx -W --keep-going docs build/docs``.
"""

import inspect

from sphinx import addnodes
from sphinx.util.inspect import stringify_signature

import jaxpool
from jaxpool import _modules

project = "jaxpool"
author = "the jaxpool authors"
copyright = "the jaxpool authors"
release = version = jaxpool.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]

# The docstrings are Google style (Args, Returns, Example). Arguments documented together
# ("kernel_size, stride: ...") stay together; Returns is prose (the shape contract), not
# "type: description", so it is shown as written.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_param = False
napoleon_custom_sections = ["Returns"]

autodoc_member_order = "bysource"
# Signatures say ArrayLike rather than the eight types it stands for (jaxpool's own size
# aliases are short unions, shown as such).
autodoc_type_aliases = {"ArrayLike": "ArrayLike"}
autodoc_preserve_defaults = True

exclude_patterns = ["img"]
toc_object_entries = False  # the contents list pages and sections, not every function
html_theme = "alabaster"
html_theme_options = {"page_width": "1250px"}  # room for the signatures and code
html_static_path: list[str] = []


def _drop_merged_defaults(app, doctree):
    # Sphinx shows an overload's ``= ...`` default as the implementation's, which makes
    # max pooling's ``return_indices: Literal[True] = ...`` read ``= False``: such a
    # parameter is shown without its default.
    for parameter in list(doctree.findall(addnodes.desc_parameter)):
        text = parameter.astext()
        if "Literal[True]" in text and text.endswith("= False"):
            operator = next(parameter.findall(addnodes.desc_sig_operator))
            del parameter.children[parameter.index(operator) - 1:]


def _module_signature(app, what, name, obj, options, signature, return_annotation):
    # The Flax classes' constructors are the framework's (linen adds parent and name, nnx
    # shows *args): show the fields of their description, what a user passes.
    if what == "class" and name.startswith(("jaxpool.linen.", "jaxpool.nnx.")):
        description = _modules.DESCRIPTIONS.get(obj.__name__)
        if description is None:  # a module with weights: its own constructor's arguments
            signature = inspect.signature(obj.__init__)  # (less self, and linen's parent, name)
            signature = signature.replace(parameters=[
                p for p in list(signature.parameters.values())[1:]
                if p.name not in ("parent", "name")])
        else:
            signature = inspect.signature(description)
        return stringify_signature(signature, unqualified_typehints=True,
                                   show_return_annotation=False), None
    return None


def setup(app):
    app.connect("doctree-read", _drop_merged_defaults)
    app.connect("autodoc-process-signature", _module_signature)
