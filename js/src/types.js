// Shared JSDoc types: the wire contract of ../PROTOCOL.md, as the front end sees it.

/**
 * One row of the tree (PROTOCOL.md "Row dict"), pre-order.
 * @typedef {{
 *   name: string, parent: string | null, depth: number, cls: string,
 *   kind: "module" | "node", params: number, children: number
 * }} Row
 */

/**
 * The latest output shape seen; `example`: the one on the example inputs, if any.
 * @typedef {{ shape: number[], dtype: string, example?: { shape: number[], dtype: string } }} ShapeInfo
 */
/** @typedef {{ name: string, kind: string }} HookInfo */
/** @typedef {{ text: string, layer: string, count: number, detail: string, key: string }} ErrorEntry */
/** The first NaN / Inf record of one key: [layer, key, step, nans, infs]. @typedef {[string, string, number, number, number]} NonFinite */

/**
 * Synced traits (PROTOCOL.md "Synced traits").
 * @typedef {{
 *   rows: Row[], shapes: Record<string, ShapeInfo>, show_nodes: boolean, nodes_error: string,
 *   selected: string[], gradients: boolean, max_rate: number, hooks: HookInfo[],
 *   errors: ErrorEntry[], notes: string[], status: string, replaced: string, search: string,
 *   clicks: string,
 *   node_in: Record<string, string>, node_out: Record<string, string>,
 *   cut_report: Record<string, any>, code: string, run?: { layers?: string[] }, closed: boolean,
 *   param_layers: string[], nonfinite?: NonFinite[], no_values?: Record<string, string>,
 *   param_notes?: Record<string, string>, snapshot?: Snapshot, compiling?: boolean
 * }} Traits
 */

/** @typedef {import("@anywidget/types").AnyModel<Traits>} Model */

/** @typedef {{ buffer: number, dtype: string, shape: number[] }} BinaryRef */

/**
 * One tensor leaf of one layer at one step, as sent by Python (hist still a reference).
 * @typedef {{
 *   key: string, layer: string, leaf: string, step: number,
 *   kind: "activation" | "gradient" | "weight" | "weight grad" | "update",
 *   training?: boolean,
 *   shape: number[], dtype: string, numel: number,
 *   mean: number | null, std: number | null, min: number | null, max: number | null,
 *   zeros: number, nans: number, infs: number, hist: BinaryRef, lo: number, hi: number,
 *   l2?: number | null, every?: number, sampled?: number
 * }} WireItem
 */

/**
 * A WireItem whose histogram has been decoded.
 * @typedef {Omit<WireItem, "hist"> & { counts: ArrayLike<number> }} Item
 */

/**
 * The `snapshot` trait (PROTOCOL.md "Snapshot"): what the panels showed, for a view with no kernel.
 * @typedef {{
 *   step?: number, training?: boolean | null, left_out?: number,
 *   stats?: { items: WireItem[], history: Record<string, WireItem[]> },
 *   attention?: { items: import("./heatmap/store.js").WireMap[] }, buffers?: string[]
 * }} Snapshot
 */

export {};
