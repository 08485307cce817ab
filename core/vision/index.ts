/**
 * Images into chat: decoding (PNG, JPEG), the Idefics3 / SmolVLM processor and folder, and the kit
 * that feeds image features into a decoder through its embeddings. See docs/llm.md, "Images".
 */

export { IMAGE_FORMATS, dataUrlBytes, decodeImage, imageElementBytes, type DecodedImage } from './image-decode.js';
export { decodePng } from './png.js';
export { Idefics3Processor, idefics3Pixels, pixelValuesOf, readVisionFolder, resizeBilinear, type PixelJob, type PixelRunner, type PixelValues, type VisionPaths } from './idefics3.js';
export { resizeLanczos3, type Pixels } from './vips-resize.js';
export { ImageBank, floatsOf, halfBitsOf, imagePromptIds, imageTokenOf, visionKit, type Floats, type VisionRunner, type VisionTypes } from './vision-kit.js';
export { IMAGE_KEY_BASE, IMAGE_KEY_SPAN, type ImageInput, type ImageProcessor, type PreparedImage } from './image-input.js';
