import NIOCore
import RealtimeCore
import Testing

@Suite struct SSEParserTests {
    func events(_ text: String, chunkSize: Int? = nil, configuration: SSEParser.Configuration = .init()) throws -> [SSEParser.Output] {
        var parser = SSEParser(configuration: configuration)
        var outputs: [SSEParser.Output] = []
        let bytes = Array(text.utf8)
        let size = chunkSize ?? max(bytes.count, 1)
        var offset = 0
        while offset < bytes.count {
            let chunk = Array(bytes[offset..<min(offset + size, bytes.count)])
            try parser.parse(ByteBuffer(bytes: chunk)) { outputs.append($0) }
            offset += size
        }
        return outputs
    }

    @Test func crlfMultiLineUnicodeInOneChunk() throws {
        let text = "event: text\r\ndata: grüße\r\ndata: 豆腐 €\r\ndata: last line\r\n\r\n"
        #expect(try events(text) == [.event(ServerSentEvent(type: "text", data: "grüße\n豆腐 €\nlast line"))])
    }

    @Test func commentsAreEmittedOnlyOnRequest() throws {
        let text = ": keep-alive\ndata: x\n\n"
        #expect(try events(text) == [.event(ServerSentEvent(data: "x"))])
        #expect(try events(text, configuration: .init(emitsComments: true)) == [.comment("keep-alive"), .event(ServerSentEvent(data: "x"))])
    }

    @Test func anEventLargerThanTheLimitFailsWithATypedError() throws {
        let text = "data: " + String(repeating: "a", count: 5000) + "\n\n"
        for chunk in [nil, 100] as [Int?] {
            let error = #expect(throws: RealtimeError.self) { _ = try events(text, chunkSize: chunk, configuration: .init(maxEventSize: 1000)) }
            #expect(error?.code == .messageTooLarge)
        }
    }

    /// The limit does not depend on how the stream is cut: a long line of any field (a comment, an
    /// unknown field, an event name) fails alike whole, in pieces and byte by byte (found by
    /// Scripts/fuzz.sh: whole, a 531-byte unknown field passed a 512-byte limit; in pieces it failed).
    @Test(arguments: [": ", "x-unknown: ", "event: ", "id: ", "retry: 1"])
    func aLongLineFailsWhateverTheChunking(field: String) throws {
        let text = field + String(repeating: "7", count: 1200) + "\ndata: x\n\n"
        for chunk in [nil, 100, 1] as [Int?] {
            let error = #expect(throws: RealtimeError.self, "chunk \(chunk.map(String.init) ?? "whole")") {
                _ = try events(text, chunkSize: chunk, configuration: .init(maxEventSize: 1000, emitsComments: true))
            }
            #expect(error?.code == .messageTooLarge)
        }
        // Just under the limit, every chunking passes and gives the same outputs.
        let fits = field + String(repeating: "7", count: 900) + "\ndata: x\n\n"
        let whole = try events(fits, configuration: .init(maxEventSize: 1000, emitsComments: true))
        let sevens = String(repeating: "7", count: 900)
        let expected = ServerSentEvent(type: field == "event: " ? sevens : "message", data: "x", lastEventId: field == "id: " ? sevens : "")
        #expect(whole.last == .event(expected))
        for chunk in [100, 1] { #expect(try events(fits, chunkSize: chunk, configuration: .init(maxEventSize: 1000, emitsComments: true)) == whole) }
    }

    @Test func manyDataLinesAddUpAgainstTheLimit() throws {
        let text = String(repeating: "data: 0123456789\n", count: 200) + "\n"
        let error = #expect(throws: RealtimeError.self) { _ = try events(text, configuration: .init(maxEventSize: 1000)) }
        #expect(error?.code == .messageTooLarge)
    }

    @Test func aSevenMegabyteSingleLineArrivesWhole() throws {
        let payload = String(repeating: "x", count: 7 << 20)
        let outputs = try events("data: " + payload + "\n\n", chunkSize: 64 * 1024)
        #expect(outputs.count == 1)
        if case .event(let event) = outputs.first { #expect(event.data.utf8.count == 7 << 20) }
    }

    @Test func crOnlyLineEndsAcrossManyLinesInOneChunk() throws {
        let text = String(repeating: "data: a\r\r", count: 1000)
        #expect(try events(text).count == 1000)
    }

    @Test func retryValuesAreReported() throws {
        #expect(try events("retry: 1500\n\n") == [.retry(1500)])
        #expect(try events("retry: +5\nretry: 5 \nretry:\n\n").isEmpty)
        #expect(try events("retry: 99999999999999999999999\n\n") == [.retry(Int.max)])
    }

    /// A memory promise: a stream that once carried a large event does not keep its size while idle.
    @Test("Buffers that grew for a 1 MiB event, sent whole and in 1 KiB pieces, are released once it is dispatched")
    func largeEventBuffersAreReleased() throws {
        let big = String(repeating: "x", count: 1 << 20)
        let text = "event: \(big)\nid: \(big)\ndata: \(big)\n\nid: 1\ndata: small\n\n"
        for chunkSize in [nil, 1024] {
            var parser = SSEParser()
            #expect(parser.bufferCapacity == 0, "nothing is reserved before an event arrives")
            var outputs: [SSEParser.Output] = []
            let bytes = Array(text.utf8)
            let size = chunkSize ?? bytes.count
            var offset = 0
            var peak = 0
            while offset < bytes.count {
                try parser.parse(ByteBuffer(bytes: bytes[offset..<min(offset + size, bytes.count)])) { outputs.append($0) }
                peak = max(peak, parser.bufferCapacity)
                offset += size
            }
            #expect(outputs.count == 2)
            #expect(outputs.last == .event(ServerSentEvent(data: "small", lastEventId: "1")))
            if chunkSize != nil { #expect(peak >= 1 << 20, "the pieces were collected in the parser's buffers") }
            #expect(parser.bufferCapacity <= 4 * SSEParser.retainedCapacity, "held after the burst: \(parser.bufferCapacity) bytes")
        }
    }
}
