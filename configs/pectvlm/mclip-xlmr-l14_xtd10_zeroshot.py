# Zero-shot M-CLIP on the 900 XTD10 test images, every language read by M-CLIP itself (the
# branch holds no module, so it is M-CLIP's text encoder unchanged).
_base_ = ['./_base_/xtd10_zeroshot_test.py']
