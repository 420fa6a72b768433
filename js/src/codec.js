// The one codec table: `{buffer, dtype, shape}` + message buffers -> typed array (STYLE.md 11).

/** @typedef {import("./types.js").BinaryRef} BinaryRef */
/** @typedef {Float32Array | Float64Array | Uint8Array | Int8Array | Int16Array | Uint16Array | Int32Array | Uint32Array} Typed */

/** @type {Record<string, { BYTES_PER_ELEMENT: number, new (b: ArrayBuffer, o: number, n: number): Typed }>} */
export const CODECS = {
  float32: Float32Array,
  float64: Float64Array,
  uint8: Uint8Array,
  int8: Int8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
};

/**
 * Decode one binary reference. Buffers may be DataView (anywidget), ArrayBuffer or typed arrays.
 * Copies when the view is not aligned for the element type.
 * @param {BinaryRef} ref
 * @param {ArrayLike<DataView | ArrayBuffer | ArrayBufferView> | undefined} buffers
 * @returns {Typed}
 */
export function decode(ref, buffers) {
  const Ctor = CODECS[ref.dtype];
  if (!Ctor) throw new Error(`unknown dtype ${JSON.stringify(ref.dtype)}; known: ${Object.keys(CODECS).join(", ")}`);
  const raw = buffers?.[ref.buffer];
  if (raw == null) throw new Error(`missing buffer ${ref.buffer} (message has ${buffers?.length ?? 0})`);
  const view = ArrayBuffer.isView(raw)
    ? raw
    : new DataView(/** @type {ArrayBuffer} */ (raw));
  const size = Ctor.BYTES_PER_ELEMENT;
  const n = ref.shape.reduce((a, b) => a * b, 1);
  if (view.byteLength < n * size) {
    throw new Error(`buffer ${ref.buffer} has ${view.byteLength} bytes, ${ref.dtype}${JSON.stringify(ref.shape)} needs ${n * size}`);
  }
  const buf = /** @type {ArrayBuffer} */ (view.buffer);
  if (view.byteOffset % size === 0) return new Ctor(buf, view.byteOffset, n);
  const copy = buf.slice(view.byteOffset, view.byteOffset + n * size);
  return new Ctor(copy, 0, n);
}
