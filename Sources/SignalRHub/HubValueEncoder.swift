import Foundation
import OrderedCollections
import RealtimeCore

/// An `Encoder` that builds the `JSONValue` of a typed argument, client result or upload item
/// directly, instead of writing JSON text with `JSONEncoder` and reading it back (what
/// `HubValueCoding` did before). The values are `JSONEncoder`'s, with `HubValueCoding`'s date
/// strategy, but for two things that the text could not keep:
/// - members keep the order they were encoded in (a struct's declaration order); `JSONEncoder` on
///   Linux writes an object's keys in a `Dictionary`'s order, which changes from process to process;
/// - `Data` anywhere in the value is `.binary`, as it already was at the top level: the same base64
///   string in JSON, but MessagePack's `bin` where the text path gave a `str` (servers read
///   `byte[]` members from `bin`).
///
/// Rules, as `JSONEncoder`: a non-finite `Double` or `Float` is an `EncodingError.invalidValue`;
/// `Float` and `Decimal` are the numbers their text names (so `Float(0.1)` is 0.1, not
/// 0.10000000149011612); `Date` is an ISO 8601 string; `URL` its absolute string; a nested value
/// that encodes nothing is an empty object, a top-level one an error; a `JSONValue` member is taken
/// as it is.
struct HubValueEncoder {
    static func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        guard let node = try HubValueEncoding.node(of: value, encoder: HubValueEncoding(base: .root, key: nil)) else {
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "Top-level \(T.self) did not encode any values."))
        }
        return node.value
    }
}

/// What an encoder made: a finished value, or an object or array that containers may still add to.
private enum Node {
    case value(JSONValue)
    case object(ObjectBox)
    case array(ArrayBox)
    /// The encoder handed out by `superEncoder()`, read when the whole value is finished.
    case deferred(HubValueEncoding)

    var value: JSONValue {
        switch self {
        case .value(let value): value
        case .object(let box): .object(box.finished)
        case .array(let box): .array(box.finished)
        case .deferred(let encoder): encoder.node?.value ?? .object([:])
        }
    }
}

/// An object's members as they are written. A member encoded through `encode(_:forKey:)` is
/// finished when that returns and goes straight in; only nested containers and super encoders,
/// which their caller may still write to, are kept open (a placeholder holds their place) and
/// read at the end.
private final class ObjectBox {
    // Only the encoding thread touches a box, one access at a time: no runtime exclusivity checks.
    @exclusivity(unchecked) var members: OrderedDictionary<String, JSONValue> = [:]
    @exclusivity(unchecked) var open: [(key: String, node: Node)] = []

    init() {
        members.reserveCapacity(8)
    }

    func set(_ value: JSONValue, for key: String) {
        members[key] = value
        if !open.isEmpty { open.removeAll { $0.key == key } }
    }

    func setOpen(_ node: Node, for key: String) {
        set(.null, for: key)
        open.append((key, node))
    }

    func openNode(for key: String) -> Node? { open.last { $0.key == key }?.node }

    var finished: OrderedDictionary<String, JSONValue> {
        guard !open.isEmpty else { return members }
        var members = members
        for (key, node) in open { members[key] = node.value }
        return members
    }
}

/// An array's elements as they are written; open elements as in `ObjectBox`.
private final class ArrayBox {
    @exclusivity(unchecked) var elements: [JSONValue] = []
    @exclusivity(unchecked) var open: [(index: Int, node: Node)] = []

    init() {
        elements.reserveCapacity(4)
    }

    func append(_ value: JSONValue) { elements.append(value) }

    func appendOpen(_ node: Node) {
        open.append((elements.count, node))
        elements.append(.null)
    }

    var finished: [JSONValue] {
        guard !open.isEmpty else { return elements }
        var elements = elements
        for (index, node) in open { elements[index] = node.value }
        return elements
    }
}

/// A coding path built only when asked for (an error, or a value that reads its path): the
/// encoder whose path comes first, then the keys of nested containers below it (usually none).
private struct LazyPath {
    let encoder: HubValueEncoding?
    let nested: [any CodingKey]

    static var root: LazyPath { LazyPath(encoder: nil, nested: []) }

    var keys: [any CodingKey] { (encoder?.codingPath ?? []) + nested }

    func appending(_ key: any CodingKey) -> LazyPath { LazyPath(encoder: encoder, nested: nested + [key]) }
}

private final class HubValueEncoding: Encoder {
    /// The path to the container holding this value, and the key within it.
    let base: LazyPath
    let key: (any CodingKey)?
    var codingPath: [any CodingKey] { key.map { base.keys + [$0] } ?? base.keys }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// What this encoder's value became; nil while nothing was encoded.
    @exclusivity(unchecked) var node: Node?

    init(base: LazyPath, key: (any CodingKey)?) {
        self.base = base
        self.key = key
    }

    private var ownPath: LazyPath { LazyPath(encoder: self, nested: []) }

    /// As JSONEncoder, a container asked for again is the one given before.
    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let box: ObjectBox
        if case .object(let existing) = node {
            box = existing
        } else {
            box = ObjectBox()
            node = .object(box)
        }
        return KeyedEncodingContainer(KeyedContainer<Key>(box: box, path: ownPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let box: ArrayBox
        if case .array(let existing) = node {
            box = existing
        } else {
            box = ArrayBox()
            node = .array(box)
        }
        return UnkeyedContainer(box: box, path: ownPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleValue(encoder: self) }

    /// `value` as a node: the types JSONEncoder writes specially, or what `value.encode(to:)` makes
    /// of `encoder` (made only when needed); nil if it encoded nothing.
    static func node<T: Encodable>(of value: T, encoder: @autoclosure () -> HubValueEncoding) throws -> Node? {
        // Compared by type first: a dynamic cast per member costs more than the rest of it.
        if T.self == JSONValue.self || T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self {
            switch value {
            case let value as JSONValue: return .value(value)
            case let value as Date: return .value(.string(MessagePackHubProtocol.iso8601(value)))
            case let value as Data: return .value(.binary(value))
            case let value as URL: return .value(.string(value.absoluteString))
            case let value as Decimal:
                // An integral Decimal in the 64-bit ranges stays exact (JSONEncoder writes its digits).
                if let exact = Int64(value.description) { return .value(.integer(exact)) }
                if let exact = UInt64(value.description) { return .value(.unsignedInteger(exact)) }
                guard let number = Double(value.description), number.isFinite else {
                    throw EncodingError.invalidValue(value, .init(codingPath: encoder().codingPath, debugDescription: "Unable to encode Decimal \(value) directly in JSON."))
                }
                return .value(.number(number))
            default: break
            }
        }
        let encoder = encoder()
        try value.encode(to: encoder)
        return encoder.node
    }

    /// A member or element at `key` below `path`, finished: an empty object if it encoded nothing.
    static func member<T: Encodable>(_ value: T, path: LazyPath, key: any CodingKey) throws -> JSONValue {
        try node(of: value, encoder: HubValueEncoding(base: path, key: key))?.value ?? .object([:])
    }
}

/// The scalars of every container, as JSONEncoder writes them.
private enum Scalar {
    static func double(_ value: Double, _ path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(value, .init(codingPath: path, debugDescription: "Unable to encode Double.\(value) directly in JSON."))
        }
        return .number(value)
    }

    static func float(_ value: Float, _ path: [any CodingKey]) throws -> JSONValue {
        guard value.isFinite else {
            throw EncodingError.invalidValue(value, .init(codingPath: path, debugDescription: "Unable to encode Float.\(value) directly in JSON."))
        }
        // JSONEncoder writes the Float's shortest text, which a reader takes as that decimal.
        return .number(Double(value.description) ?? Double(value))
    }

    /// Exact, whatever the width: `Int64`'s range as ``JSONValue/integer(_:)``, above it as
    /// ``JSONValue/unsignedInteger(_:)``.
    static func integer(_ value: some BinaryInteger) -> JSONValue {
        if let exact = Int64(exactly: value) { return .integer(exact) }
        if let exact = UInt64(exactly: value) { return .unsignedInteger(exact) }
        return .number(Double(value))
    }
}

private struct SingleValue: SingleValueEncodingContainer {
    let encoder: HubValueEncoding
    var codingPath: [any CodingKey] { encoder.codingPath }

    private func set(_ value: JSONValue) { encoder.node = .value(value) }

    func encodeNil() { set(.null) }
    func encode(_ value: Bool) { set(.bool(value)) }
    func encode(_ value: String) { set(.string(value)) }
    func encode(_ value: Double) throws { set(try Scalar.double(value, codingPath)) }
    func encode(_ value: Float) throws { set(try Scalar.float(value, codingPath)) }
    func encode(_ value: Int) { set(Scalar.integer(value)) }
    func encode(_ value: Int8) { set(Scalar.integer(value)) }
    func encode(_ value: Int16) { set(Scalar.integer(value)) }
    func encode(_ value: Int32) { set(Scalar.integer(value)) }
    func encode(_ value: Int64) { set(Scalar.integer(value)) }
    func encode(_ value: UInt) { set(Scalar.integer(value)) }
    func encode(_ value: UInt8) { set(Scalar.integer(value)) }
    func encode(_ value: UInt16) { set(Scalar.integer(value)) }
    func encode(_ value: UInt32) { set(Scalar.integer(value)) }
    func encode(_ value: UInt64) { set(Scalar.integer(value)) }
    func encode<T: Encodable>(_ value: T) throws {
        encoder.node = try HubValueEncoding.node(of: value, encoder: encoder) ?? .object(ObjectBox())
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: ObjectBox
    let path: LazyPath
    var codingPath: [any CodingKey] { path.keys }

    private func set(_ value: JSONValue, _ key: Key) { box.set(value, for: key.stringValue) }

    func encodeNil(forKey key: Key) { set(.null, key) }
    func encode(_ value: Bool, forKey key: Key) { set(.bool(value), key) }
    func encode(_ value: String, forKey key: Key) { set(.string(value), key) }
    func encode(_ value: Double, forKey key: Key) throws { set(try Scalar.double(value, codingPath + [key]), key) }
    func encode(_ value: Float, forKey key: Key) throws { set(try Scalar.float(value, codingPath + [key]), key) }
    func encode(_ value: Int, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: Int8, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: Int16, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: Int32, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: Int64, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: UInt, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: UInt8, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: UInt16, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: UInt32, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode(_ value: UInt64, forKey key: Key) { set(Scalar.integer(value), key) }
    func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        set(try HubValueEncoding.member(value, path: path, key: key), key)
    }

    /// As JSONEncoder, a container asked for again at the same key is the one given before.
    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested: ObjectBox
        if case .object(let existing) = box.openNode(for: key.stringValue) {
            nested = existing
        } else {
            nested = ObjectBox()
            box.setOpen(.object(nested), for: key.stringValue)
        }
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(box: nested, path: path.appending(key)))
    }

    func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested: ArrayBox
        if case .array(let existing) = box.openNode(for: key.stringValue) {
            nested = existing
        } else {
            nested = ArrayBox()
            box.setOpen(.array(nested), for: key.stringValue)
        }
        return UnkeyedContainer(box: nested, path: path.appending(key))
    }

    func superEncoder() -> any Encoder { superEncoder(named: "super", key: SuperKey()) }
    func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key.stringValue, key: key) }

    private func superEncoder(named name: String, key: any CodingKey) -> any Encoder {
        let encoder = HubValueEncoding(base: path, key: key)
        box.setOpen(.deferred(encoder), for: name)
        return encoder
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let box: ArrayBox
    let path: LazyPath
    var codingPath: [any CodingKey] { path.keys }
    var count: Int { box.elements.count }

    private var nextKey: IndexKey { IndexKey(count) }
    private func append(_ value: JSONValue) { box.append(value) }

    func encodeNil() { append(.null) }
    func encode(_ value: Bool) { append(.bool(value)) }
    func encode(_ value: String) { append(.string(value)) }
    func encode(_ value: Double) throws { append(try Scalar.double(value, codingPath + [nextKey])) }
    func encode(_ value: Float) throws { append(try Scalar.float(value, codingPath + [nextKey])) }
    func encode(_ value: Int) { append(Scalar.integer(value)) }
    func encode(_ value: Int8) { append(Scalar.integer(value)) }
    func encode(_ value: Int16) { append(Scalar.integer(value)) }
    func encode(_ value: Int32) { append(Scalar.integer(value)) }
    func encode(_ value: Int64) { append(Scalar.integer(value)) }
    func encode(_ value: UInt) { append(Scalar.integer(value)) }
    func encode(_ value: UInt8) { append(Scalar.integer(value)) }
    func encode(_ value: UInt16) { append(Scalar.integer(value)) }
    func encode(_ value: UInt32) { append(Scalar.integer(value)) }
    func encode(_ value: UInt64) { append(Scalar.integer(value)) }
    func encode<T: Encodable>(_ value: T) throws {
        append(try HubValueEncoding.member(value, path: path, key: nextKey))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = ObjectBox()
        let nestedPath = path.appending(nextKey)
        box.appendOpen(.object(nested))
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(box: nested, path: nestedPath))
    }

    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = ArrayBox()
        let nestedPath = path.appending(nextKey)
        box.appendOpen(.array(nested))
        return UnkeyedContainer(box: nested, path: nestedPath)
    }

    func superEncoder() -> any Encoder {
        let encoder = HubValueEncoding(base: path, key: nextKey)
        box.appendOpen(.deferred(encoder))
        return encoder
    }
}
