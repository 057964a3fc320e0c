import Foundation
import RealtimeCore
import Testing

/// The WHATWG "interpreting an event stream" rules as data: every case of `sse-vectors.json`
/// (web-platform-tests `eventsource/` plus WHATWG-rule edge cases; provenance in `sse-vectors.md`),
/// each run whole, split at every byte position into two chunks, in 1-byte chunks, and in the
/// chunks the test itself uses.
struct SSEVector: Decodable, Sendable, CustomTestStringConvertible {
    struct Event: Decodable, Sendable {
        let type: String?
        let data: String?
        let lastEventId: String?
    }

    let name: String
    let origin: String
    let streamHex: String
    let chunksHex: [String]?
    let initialLastEventId: String?
    let events: [Event]
    let onlyFirstEvents: Bool
    let retry: Int?
    let retryUnchanged: Bool?
    let notes: String

    var testDescription: String { name }
    var bytes: [UInt8] { Self.hex(streamHex) }

    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    static let all: [SSEVector] = {
        struct File: Decodable { let cases: [SSEVector] }
        guard let url = Bundle.module.url(forResource: "sse-vectors", withExtension: "json"),
            let data = try? Data(contentsOf: url),
            let file = try? JSONDecoder().decode(File.self, from: data)
        else { return [] }
        return file.cases
    }()
}

/// What a parser run produced.
struct ParseResult: Equatable {
    var events: [ServerSentEvent] = []
    var retry: Int?
    var lastEventId = ""
}

func parse(_ chunks: [[UInt8]], initialLastEventId: String = "") throws -> ParseResult {
    var parser = SSEParser(lastEventId: initialLastEventId)
    var result = ParseResult()
    for chunk in chunks {
        try chunk.withUnsafeBytes { bytes in
            try parser.parse(bytes: bytes) { output in
                switch output {
                case .event(let event): result.events.append(event)
                case .retry(let value): result.retry = value
                case .comment: break
                }
            }
        }
    }
    parser.finish()
    result.lastEventId = parser.lastEventId
    return result
}

@Suite struct SSEConformanceTests {
    @Test func allSixtyCasesAreLoaded() {
        #expect(SSEVector.all.count == 60)
    }

    @Test(arguments: SSEVector.all)
    func wholeStream(_ vector: SSEVector) throws {
        let result = try parse([vector.bytes], initialLastEventId: vector.initialLastEventId ?? "")
        check(result, against: vector)
    }

    @Test(arguments: SSEVector.all)
    func everyTwoWaySplitGivesTheSameResult(_ vector: SSEVector) throws {
        let bytes = vector.bytes
        let whole = try parse([bytes], initialLastEventId: vector.initialLastEventId ?? "")
        for split in 0...bytes.count {
            let result = try parse([Array(bytes[..<split]), Array(bytes[split...])], initialLastEventId: vector.initialLastEventId ?? "")
            #expect(result == whole, "split at \(split)")
        }
    }

    @Test(arguments: SSEVector.all)
    func oneByteChunksGiveTheSameResult(_ vector: SSEVector) throws {
        let bytes = vector.bytes
        let result = try parse(bytes.map { [$0] }, initialLastEventId: vector.initialLastEventId ?? "")
        check(result, against: vector)
    }

    @Test(arguments: SSEVector.all.filter { $0.chunksHex != nil })
    func theTestsOwnChunks(_ vector: SSEVector) throws {
        let result = try parse(vector.chunksHex!.map(SSEVector.hex), initialLastEventId: vector.initialLastEventId ?? "")
        check(result, against: vector)
    }

    func check(_ result: ParseResult, against vector: SSEVector, sourceLocation: SourceLocation = #_sourceLocation) {
        let produced = vector.onlyFirstEvents ? Array(result.events.prefix(vector.events.count)) : result.events
        #expect(produced.count == vector.events.count, "\(vector.name): \(vector.notes)", sourceLocation: sourceLocation)
        for (event, expected) in zip(produced, vector.events) {
            if let type = expected.type { #expect(event.type == type, "\(vector.name)", sourceLocation: sourceLocation) }
            if let data = expected.data { #expect(event.data == data, "\(vector.name)", sourceLocation: sourceLocation) }
            if let id = expected.lastEventId { #expect(event.lastEventId == id, "\(vector.name)", sourceLocation: sourceLocation) }
        }
        if let retry = vector.retry { #expect(result.retry == retry, "\(vector.name)", sourceLocation: sourceLocation) }
        if vector.retryUnchanged == true { #expect(result.retry == nil, "\(vector.name)", sourceLocation: sourceLocation) }
    }
}
