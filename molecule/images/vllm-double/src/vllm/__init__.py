"""TEST DOUBLE of vLLM (vllm-double), for the vllm-dual-fast Molecule scenarios and tests.

Not vLLM: it stands in for the vLLM OpenAI server image where no GPU exists. It keeps the entry
points the project touches (``vllm serve``, ``vllm.entrypoints.openai.cli_args.make_arg_parser``,
``vllm.utils.argparse_utils.FlexibleArgumentParser``, ``vllm.platforms``) and reproduces the one
failure the project exists for (vllm issue #40756); see ``vllm._double.server``.
"""

__version__ = "0.33.0"
IS_TEST_DOUBLE = True
