package import NIOCore
package import NIOHTTP1

/// The bytes of one HTTP/1.1 request with its body, as an event stream sends it.
package struct HTTPStreamRequest: Sendable {
    /// How the request line names its target (RFC 9112 section 3.2).
    package enum Form: Sendable, Equatable {
        /// `GET /path?query HTTP/1.1`: to the server itself, or through a tunnel.
        case origin
        /// `GET http://host:port/path?query HTTP/1.1`: to an HTTP proxy that forwards it (a plain
        /// `http://` request, as curl sends it), with the proxy's Basic credentials when it has some.
        case absolute(proxyAuthorization: String?)
    }

    package let method: HTTPMethod
    package let target: Endpoint
    package let headers: HTTPHeaders
    package let body: ByteBuffer?
    package let form: Form

    package init(method: HTTPMethod, target: Endpoint, headers: HTTPHeaders, body: ByteBuffer?, form: Form = .origin) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.form = form
    }

    /// Headers the request sets itself; a caller's copies would contradict the framing.
    static let reservedHeaders: Set<String> = ["host", "content-length", "transfer-encoding"]

    /// The request's bytes; fails with ``RealtimeError/Code/invalidURL`` when a header would break
    /// the request line's framing (a CR, LF or NUL in a value, a name that is not a token).
    package func encoded() throws -> ByteBuffer {
        var buffer = ByteBuffer()
        let hostPart = target.host.contains(":") ? "[\(target.host)]" : target.host
        let defaultPort = target.isSecure ? 443 : 80
        let authority = target.port == defaultPort ? hostPart : "\(hostPart):\(target.port)"
        switch form {
        case .origin:
            buffer.writeString("\(method.rawValue) \(target.pathAndQuery) HTTP/1.1\r\n")
        case .absolute:
            buffer.writeString("\(method.rawValue) \(target.scheme)://\(authority)\(target.pathAndQuery) HTTP/1.1\r\n")
        }
        buffer.writeString("Host: \(authority)\r\n")
        if case .absolute(let authorization?) = form { buffer.writeString("Proxy-Authorization: \(authorization)\r\n") }
        // Through a proxy the credentials are the proxy configuration's.
        let skipped = form == .origin ? Self.reservedHeaders : Self.reservedHeaders.union(["proxy-authorization"])
        for header in headers where !skipped.contains(header.name.lowercased()) {
            guard Self.isToken(header.name), !header.value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) else {
                throw RealtimeError(.invalidURL, "the request header \(header.name.prefix(64)) has characters HTTP/1.1 does not allow")
            }
            buffer.writeString(header.name)
            buffer.writeString(": ")
            buffer.writeString(header.value)
            buffer.writeString("\r\n")
        }
        if let body {
            buffer.writeString("Content-Length: \(body.readableBytes)\r\n\r\n")
            buffer.writeImmutableBuffer(body)
        } else if method == .POST || method == .PUT || method == .PATCH {
            buffer.writeString("Content-Length: 0\r\n\r\n")
        } else {
            buffer.writeString("\r\n")
        }
        return buffer
    }

    static func isToken(_ name: String) -> Bool {
        !name.isEmpty
            && name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    return true
                default:
                    return "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
            }
    }
}

/// Reads one HTTP/1.1 response: the head, then the body as RFC 9112 frames it (chunked, a
/// `Content-Length`, or until the connection closes), handing body bytes over as they arrive.
///
/// Interim responses (1xx other than 101) are skipped. Every violation is a
/// ``RealtimeError/Code/protocolViolation``; a head larger than ``maxHeadSize`` too.
package struct HTTPStreamResponseParser {
    /// The largest response head read (status line and headers).
    package static let maxHeadSize = 64 * 1024
    /// The longest chunk-size line or trailer section.
    static let maxLineSize = 4 * 1024

    private enum State {
        case head(scanned: Int)
        case fixed(remaining: Int)
        case untilClose
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers(size: Int)
        case complete
    }

    private var state = State.head(scanned: 0)
    /// Bytes of a head, a chunk-size line or a trailer line not complete yet.
    private var pending: ByteBuffer?
    /// Whether the response has no body whatever its headers say (the request was HEAD).
    private let isHead: Bool

    package init(isHeadRequest: Bool = false) {
        isHead = isHeadRequest
    }

    /// Whether the head has been read.
    package var hasHead: Bool {
        if case .head = state { return false }
        return true
    }

    /// Whether the whole response has been read.
    package var isComplete: Bool {
        if case .complete = state { return true }
        return false
    }

    /// Reads `input`: `onHead` gets the final head, `onBody` each run of body bytes in order.
    /// Returns whether the response is complete (bytes after its end are ignored).
    package mutating func parse(
        _ input: ByteBuffer, onHead: (HTTPResponseStatus, HTTPHeaders) throws -> Void, onBody: (ByteBuffer) throws -> Void
    ) throws -> Bool {
        var input = input
        while true {
            switch state {
            case .complete:
                return true
            case .head(let scanned):
                var head = pending ?? ByteBuffer()
                if pending == nil, input.readableBytes > 0 {
                    head = input
                    input.moveReaderIndex(forwardBy: input.readableBytes)
                } else {
                    head.writeBuffer(&input)
                }
                guard let end = Self.endOfHead(in: head, from: scanned) else {
                    guard head.readableBytes <= Self.maxHeadSize else {
                        throw RealtimeError(.protocolViolation, "the response head is larger than \(Self.maxHeadSize) bytes")
                    }
                    state = .head(scanned: max(0, head.readableBytes - 3))
                    pending = head.readableBytes > 0 ? head : nil
                    return false
                }
                guard end <= Self.maxHeadSize else {
                    throw RealtimeError(.protocolViolation, "the response head is larger than \(Self.maxHeadSize) bytes")
                }
                let headBytes = head.readSlice(length: end)!
                pending = nil
                input = head
                let (status, headers) = try Self.parseHead(headBytes)
                if status.code / 100 == 1 {
                    if status.code == 101 {
                        throw RealtimeError(.protocolViolation, "the server switched protocols (101) on a request that asked for no upgrade")
                    }
                    state = .head(scanned: 0)
                    continue
                }
                state = try Self.bodyFraming(status: status, headers: headers, isHead: isHead)
                try onHead(status, headers)
            case .fixed(let remaining):
                if remaining == 0 {
                    state = .complete
                    continue
                }
                guard input.readableBytes > 0 else { return false }
                let slice = input.readSlice(length: min(remaining, input.readableBytes))!
                state = .fixed(remaining: remaining - slice.readableBytes)
                try onBody(slice)
            case .untilClose:
                if input.readableBytes > 0 { try onBody(input) }
                return false
            case .chunkSize:
                guard let line = try readLine(&input) else { return false }
                let size = try Self.chunkSize(line)
                state = size == 0 ? .trailers(size: 0) : .chunkData(remaining: size)
            case .chunkData(let remaining):
                guard input.readableBytes > 0 else { return false }
                let slice = input.readSlice(length: min(remaining, input.readableBytes))!
                state = slice.readableBytes == remaining ? .chunkDataEnd : .chunkData(remaining: remaining - slice.readableBytes)
                try onBody(slice)
            case .chunkDataEnd:
                guard let line = try readLine(&input) else { return false }
                guard line.readableBytes == 0 else {
                    throw RealtimeError(.protocolViolation, "a chunk of the response body is longer than its size line says")
                }
                state = .chunkSize
            case .trailers(let size):
                guard let line = try readLine(&input) else { return false }
                if line.readableBytes == 0 {
                    state = .complete
                    continue
                }
                let total = size + line.readableBytes
                guard total <= Self.maxLineSize else {
                    throw RealtimeError(.protocolViolation, "the response's trailer section is larger than \(Self.maxLineSize) bytes")
                }
                state = .trailers(size: total)
            }
        }
    }

    /// The connection closed: returns normally when that ends the response (a body read until
    /// the close), throws ``RealtimeError/Code/connectionClosed`` when the response was cut short.
    package mutating func inputClosed() throws {
        switch state {
        case .complete:
            return
        case .untilClose:
            state = .complete
        case .head:
            throw RealtimeError(.connectionClosed, "the server closed the connection before its response head was complete")
        default:
            throw RealtimeError(.connectionClosed, "the server closed the connection before the response body was complete")
        }
    }

    /// A line of a chunk-size or trailer section, without its line end (nil: not complete yet).
    private mutating func readLine(_ input: inout ByteBuffer) throws -> ByteBuffer? {
        var line = pending ?? ByteBuffer()
        guard let newline = input.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            line.writeBuffer(&input)
            guard line.readableBytes <= Self.maxLineSize else {
                throw RealtimeError(.protocolViolation, "a line of the chunked response body is longer than \(Self.maxLineSize) bytes")
            }
            pending = line
            return nil
        }
        var part = input.readSlice(length: newline - input.readerIndex + 1)!
        pending = nil
        if line.readableBytes == 0 {
            line = part
        } else {
            line.writeBuffer(&part)
        }
        line.moveWriterIndex(to: line.writerIndex - 1)
        if line.readableBytesView.last == UInt8(ascii: "\r") { line.moveWriterIndex(to: line.writerIndex - 1) }
        guard line.readableBytes <= Self.maxLineSize else {
            throw RealtimeError(.protocolViolation, "a line of the chunked response body is longer than \(Self.maxLineSize) bytes")
        }
        return line
    }

    /// The offset just past the blank line that ends a head (CRLF CRLF, or LF LF as lenient
    /// parsers accept), searching from `from`.
    private static func endOfHead(in buffer: ByteBuffer, from: Int) -> Int? {
        let view = buffer.readableBytesView
        var index = view.startIndex + from
        while let newline = view[index...].firstIndex(of: UInt8(ascii: "\n")) {
            let next = view.index(after: newline)
            if next < view.endIndex, view[next] == UInt8(ascii: "\n") { return next + 1 - view.startIndex }
            if next < view.endIndex, view[next] == UInt8(ascii: "\r") {
                let after = view.index(after: next)
                if after < view.endIndex, view[after] == UInt8(ascii: "\n") { return after + 1 - view.startIndex }
                if after == view.endIndex { return nil }
            }
            index = next
        }
        return nil
    }

    static func parseHead(_ bytes: ByteBuffer) throws -> (HTTPResponseStatus, HTTPHeaders) {
        var lines = bytes.readableBytesView.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line[...]
        }
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard let statusLine = lines.first else { throw RealtimeError(.protocolViolation, "the response has no status line") }
        let fields = statusLine.split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false)
        guard fields.count >= 2, fields[0].starts(with: "HTTP/1.".utf8), fields[0].count == 8,
            fields[1].count == 3, fields[1].allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let code = Int(String(decoding: fields[1], as: UTF8.self)), code >= 100
        else {
            throw RealtimeError(
                .protocolViolation, "the response's status line is not HTTP/1.x: \(String(decoding: statusLine.prefix(64), as: UTF8.self))")
        }
        let reason = fields.count > 2 ? String(decoding: fields[2], as: UTF8.self) : ""
        var headers = HTTPHeaders()
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), line.first != UInt8(ascii: " "), line.first != UInt8(ascii: "\t")
            else {
                throw RealtimeError(.protocolViolation, "a response header line is malformed: \(String(decoding: line.prefix(64), as: UTF8.self))")
            }
            let name = String(decoding: line[..<colon], as: UTF8.self)
            guard HTTPStreamRequest.isToken(name) else {
                throw RealtimeError(.protocolViolation, "a response header name is malformed: \(name.prefix(64))")
            }
            var value = line[line.index(after: colon)...]
            while let first = value.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { value = value.dropFirst() }
            while let last = value.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { value = value.dropLast() }
            headers.add(name: name, value: String(decoding: value, as: UTF8.self))
        }
        return (HTTPResponseStatus(statusCode: code, reasonPhrase: reason), headers)
    }

    /// How the body of a response with this head is framed (RFC 9112 section 6.3).
    private static func bodyFraming(status: HTTPResponseStatus, headers: HTTPHeaders, isHead: Bool) throws -> State {
        if isHead || status.code == 204 || status.code == 304 { return .fixed(remaining: 0) }
        let codings = headers[canonicalForm: "transfer-encoding"]
        if let last = codings.last {
            // A body whose last coding is not chunked runs until the connection closes.
            return last.lowercased() == "chunked" ? .chunkSize : .untilClose
        }
        let lengths = headers[canonicalForm: "content-length"]
        guard let first = lengths.first else { return .untilClose }
        guard lengths.allSatisfy({ $0 == first }), first.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let length = Int(first)
        else {
            throw RealtimeError(.protocolViolation, "the response's Content-Length is invalid: \(lengths.joined(separator: ", ").prefix(64))")
        }
        return .fixed(remaining: length)
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    private static func chunkSize(_ line: ByteBuffer) throws -> Int {
        var digits = line.readableBytesView[...]
        if let extensionStart = digits.firstIndex(of: UInt8(ascii: ";")) { digits = digits[..<extensionStart] }
        while let last = digits.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.count <= 15, digits.allSatisfy({ isHexDigit($0) }), let size = Int(String(decoding: digits, as: UTF8.self), radix: 16), size >= 0 else {
            throw RealtimeError(
                .protocolViolation, "a chunk-size line of the response body is invalid: \(String(decoding: line.readableBytesView.prefix(32), as: UTF8.self))")
        }
        return size
    }
}
