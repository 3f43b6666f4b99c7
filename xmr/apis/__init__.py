"""Using a trained model: load it, embed text in any trained language and media, search.

``from xmr.apis import init_retriever, MediaIndex``::

    model = init_retriever(config, checkpoint)
    index = MediaIndex.from_media(model, image_or_video_files)
    hits = index.search(model, ['ein Hund im Schnee'], lang='de', k=5)

``read_checkpoint(path)`` reads any xmr checkpoint in user code the safe way (``torch.load``
with ``weights_only=True`` and xmr's allow-list of the numpy types MMEngine's logs store).
"""
from xmr.apis.encoding_parts import EncodingParts
from xmr.apis.inference import (
    VIDEO_SUFFIXES,
    CheckpointMismatchError,
    EncodedGallery,
    NoMediaReadError,
    check_config_languages,
    check_languages,
    encode_gallery,
    encode_media,
    encode_media_in_parts,
    encode_readable_media,
    encode_text_tokens,
    encode_texts,
    init_retriever,
    load_trained_checkpoint,
    media_encoding,
    trained_languages,
)
from xmr.apis.search import MediaIndex, SearchHit
from xmr.engine.checkpoint import CheckpointReadError, read_checkpoint

__all__ = ['VIDEO_SUFFIXES', 'CheckpointMismatchError', 'CheckpointReadError', 'NoMediaReadError',
           'read_checkpoint',
           'check_languages', 'check_config_languages', 'encode_media', 'encode_readable_media',
           'encode_media_in_parts',
           'EncodingParts', 'media_encoding', 'encode_texts', 'encode_text_tokens',
           'EncodedGallery', 'encode_gallery', 'init_retriever',
           'load_trained_checkpoint', 'trained_languages', 'MediaIndex', 'SearchHit']
