import ArgumentParser
import NIOCore
import NIOHTTP1
import RealtimeCore

struct SSECommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sse", abstract: "Print the events of a Server-Sent Events stream.")

    @Argument(help: "http:// or https:// URL") var url: String
    @Flag(name: .long, help: "One JSON object per event.") var json = false
    @Option(name: .long, help: "Stop after this many events.") var count: Int?
    @Option(name: .long, help: "Send this Last-Event-ID on the first request.") var lastEventId: String?
    @Option(name: .shortAndLong, help: "A request header 'Name: value' (repeatable).") var header: [String] = []

    func run() async throws {
        var headers: HTTPHeaders = ["Accept": "text/event-stream"]
        for line in header {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { throw ValidationError("headers look like 'Name: value'") }
            headers.add(name: String(parts[0]), value: String(parts[1].drop(while: { $0 == " " })))
        }
        if let lastEventId { headers.add(name: "Last-Event-ID", value: lastEventId) }
        let asJSON = json
        let limit = count
        try await HTTPTransport.stream(HTTPRequestSpec(url: url, headers: headers)) { head, body in
            guard head.status == .ok else { throw RealtimeError.badStatus(head.status, url: url) }
            var parser = SSEParser()
            var seen = 0
            for try await chunk in body {
                var done = false
                try parser.parse(chunk) { output in
                    guard case .event(let event) = output, !done else { return }
                    print(asJSON ? event.jsonLine : "[\(event.type)] id=\(event.lastEventId) \(event.data)")
                    seen += 1
                    if let limit, seen >= limit { done = true }
                }
                if done { return }
            }
        }
    }
}

extension ServerSentEvent {
    var jsonLine: String {
        "{\"type\":\(JSONText.quote(type)),\"id\":\(JSONText.quote(lastEventId)),\"data\":\(JSONText.quote(data))}"
    }
}

enum JSONText {
    static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let s where s.value < 0x20: out += String(format: s.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    private static func String(format value: UInt32) -> Swift.String {
        let hex = Swift.String(value, radix: 16)
        return "\\u" + Swift.String(repeating: "0", count: 4 - hex.count) + hex
    }
}
