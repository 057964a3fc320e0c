import NIOCore
import NIOHTTP1
import RealtimeCore
import Testing

/// How an event stream's connection writes its request and reads the response (RFC 9112): the
/// framing rules a server's answer is held to, byte by byte.
@Suite struct HTTPStreamCodecTests {
    /// What a response read in pieces gave: the status, the headers, the body, and whether it was complete.
    struct Read {
        var status: HTTPResponseStatus?
        var headers = HTTPHeaders()
        var body = ""
        var complete = false
        var heads = 0
    }

    /// Feeds `text` in pieces of `piece` bytes (0: at once), then the connection's close when `close`.
    static func read(_ text: String, piece: Int = 0, close: Bool = false) throws -> Read {
        var parser = HTTPStreamResponseParser()
        var read = Read()
        let bytes = Array(text.utf8)
        let size = piece == 0 ? max(bytes.count, 1) : piece
        var offset = 0
        repeat {
            let part = ByteBuffer(bytes: bytes[offset..<min(offset + size, bytes.count)])
            offset += size
            read.complete = try parser.parse(
                part,
                onHead: { status, headers in
                    read.status = status
                    read.headers = headers
                    read.heads += 1
                },
                onBody: { read.body += String(buffer: $0) })
        } while offset < bytes.count && !read.complete
        if close {
            try parser.inputClosed()
            read.complete = parser.isComplete
        }
        return read
    }

    static let chunked = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + "d\r\ndata: first\n\n\r\n" + "E;ext=1\r\ndata: second\n\n\r\n" + "0\r\nX-Trailer: t\r\n\r\n"

    @Test(arguments: [0, 1, 2, 3, 7, 64])
    func aChunkedBodyReadsTheSameInAnyPieces(piece: Int) throws {
        let read = try Self.read(Self.chunked + "HTTP/1.1 after the end is ignored", piece: piece)
        #expect(read.status == .ok)
        #expect(read.headers.first(name: "content-type") == "text/event-stream")
        #expect(read.body == "data: first\n\ndata: second\n\n")
        #expect(read.complete)
        #expect(read.heads == 1)
    }

    @Test(arguments: [0, 1, 5])
    func contentLengthEndsTheBody(piece: Int) throws {
        let read = try Self.read("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\ndata: x\n\nEXTRA", piece: piece)
        #expect(read.body == "data: x\n\nEXT")
        #expect(read.complete)
    }

    @Test func withoutLengthOrChunkingTheBodyRunsUntilTheClose() throws {
        let open = try Self.read("HTTP/1.0 200 OK\r\n\r\ndata: a\n\n")
        #expect(open.body == "data: a\n\n")
        #expect(!open.complete)
        let closed = try Self.read("HTTP/1.0 200 OK\r\n\r\ndata: a\n\n", close: true)
        #expect(closed.complete)
        // The last transfer coding not chunked: the close ends it too.
        #expect(try Self.read("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz").body == "zz")
    }

    @Test func interimResponsesAreSkippedAndEmptyStatusesHaveNoBody() throws {
        let read = try Self.read("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", piece: 4)
        #expect(read.status == .noContent)
        #expect(read.heads == 1)
        #expect(read.complete)
        #expect(try Self.read("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n").complete)
    }

    @Test func lineFeedsAloneEndLinesAndHeaderValuesAreTrimmed() throws {
        let read = try Self.read("HTTP/1.1 200 OK\nContent-Type: \t text/event-stream \t\nContent-Length: 2\n\nok")
        #expect(read.headers.first(name: "content-type") == "text/event-stream")
        #expect(read.body == "ok")
        #expect(read.status?.reasonPhrase == "OK")
    }

    @Test(arguments: [
        ("SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x"),
        ("HTTP/2 200\r\n\r\n", "not HTTP/1.x"),
        ("HTTP/1.1 20 OK\r\n\r\n", "not HTTP/1.x"),
        ("HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", "malformed"),
        ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "malformed"),
        ("HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "malformed"),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        ("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Content-Length"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk-size"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+1\r\nx\r\n", "chunk-size"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n", "longer than its size"),
        ("HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
    ])
    func aMalformedResponseIsAProtocolViolation(response: String, says: String) throws {
        let error = #expect(throws: RealtimeError.self) { try Self.read(response) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.detail.contains(says) == true, "\(String(describing: error))")
    }

    @Test func anEndlessHeadOrChunkLineIsRefusedAtItsLimit() throws {
        let endless = "HTTP/1.1 200 OK\r\n" + String(repeating: "X-Filler: 0123456789abcdef\r\n", count: 4000)
        let head = #expect(throws: RealtimeError.self) { try Self.read(endless, piece: 1000) }
        #expect(head?.code == .protocolViolation)
        let line = #expect(throws: RealtimeError.self) {
            try Self.read(Self.chunked.prefix(80) + "1" + String(repeating: "0", count: 5000), piece: 512)
        }
        #expect(line?.code == .protocolViolation)
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        "HTTP/1.1 200 OK\r\nContent-Ty",
    ])
    func aCloseBeforeTheEndIsALostConnection(response: String) throws {
        let error = #expect(throws: RealtimeError.self) { try Self.read(response, close: true) }
        #expect(error?.code == .connectionClosed)
    }

    @Test func theRequestCarriesHostLengthAndTheCallersHeadersOnly() throws {
        let target = try Endpoint("http://[::1]:8080/events?room=a", allowedSchemes: ["http", "https"])
        let request = HTTPStreamRequest(
            method: .POST, target: target,
            headers: ["Accept": "text/event-stream", "Host": "spoofed", "Content-Length": "99", "Transfer-Encoding": "chunked"],
            body: ByteBuffer(string: "{}"))
        #expect(String(buffer: try request.encoded())
            == "POST /events?room=a HTTP/1.1\r\nHost: [::1]:8080\r\nAccept: text/event-stream\r\nContent-Length: 2\r\n\r\n{}")
        let secure = try Endpoint("https://example.com/e", allowedSchemes: ["http", "https"])
        #expect(String(buffer: try HTTPStreamRequest(method: .GET, target: secure, headers: [:], body: nil).encoded())
            == "GET /e HTTP/1.1\r\nHost: example.com\r\n\r\n")
    }

    @Test(arguments: [("X-Token", "a\r\nInjected: yes"), ("X-Token", "a\nb"), ("Bad Name", "x"), ("", "x")])
    func aHeaderThatWouldBreakTheFramingIsRefused(name: String, value: String) throws {
        let target = try Endpoint("http://127.0.0.1:1/e", allowedSchemes: ["http"])
        let error = #expect(throws: RealtimeError.self) {
            try HTTPStreamRequest(method: .GET, target: target, headers: [name: value], body: nil).encoded()
        }
        #expect(error?.detail.contains("Injected") != true)
    }
}
