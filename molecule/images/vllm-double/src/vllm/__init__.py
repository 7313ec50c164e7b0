"""TEST DOUBLE of vLLM (vllm-double), for the vllm-dual-fast Molecule scenarios and tests.

Not vLLM: it stands in for the vLLM OpenAI server image where no GPU exists. It keeps the entry
points the project touches (``vllm serve``, ``make_arg_parser`` in
``vllm.entrypoints.openai.cli_args``, ``vllm.utils.argparse_utils.FlexibleArgumentParser``,
``vllm.platforms``) and reproduces the one failure the project exists for (vllm issue #40756); see
``vllm._double.server``.

The tree as committed has vLLM 0.27.1's module layout and version; the image's build step
``layout.py 0.33.0`` moves the parser to ``vllm.entrypoints.common.cli_args`` and sets the version
line below to 0.33.0, as vLLM 0.33.0 has it (keep it one line: layout.py rewrites it).
"""

__version__ = "0.27.1"
IS_TEST_DOUBLE = True
